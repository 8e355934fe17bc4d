// Command etcd runs the etcd server from the go.etcd.io/etcd/server/v3
// module, built in the same module graph as kube-apiserver so both agree on
// the etcd client version.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
