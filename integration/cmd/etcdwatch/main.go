// Command etcdwatch is the oracle of the upgrade bench
// (integration/scripts/bench-upgrade.sh): etcd's own watch on a key prefix,
// from a revision, written as one JSON line per event. The watchers' event
// sequences through kube-apiserver and through watchmux are checked against
// it, so a lost, duplicated or reordered event cannot hide behind an API
// server's watch cache: etcd is where resourceVersions come from.
//
//	etcdwatch --endpoint http://127.0.0.1:25379 --prefix /registry/configmaps/NS/ --rev N --out FILE
//
// Each line: {"key":"/registry/...","type":"PUT"|"DELETE","mod_revision":N,"create_revision":N}
// (a DELETE's mod_revision is the deletion's revision, which is the
// resourceVersion kube-apiserver gives the DELETED event's object). Once the
// watch is established it prints "watching" on stderr; it runs until
// SIGINT or SIGTERM, then flushes and exits 0. A compacted start revision or
// a broken watch is an error (exit 1): the oracle must not have gaps.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

type event struct {
	Key            string `json:"key"`
	Type           string `json:"type"`
	ModRevision    int64  `json:"mod_revision"`
	CreateRevision int64  `json:"create_revision"`
}

func main() {
	endpoint := flag.String("endpoint", "http://127.0.0.1:2379", "etcd client URL")
	prefix := flag.String("prefix", "", "key prefix to watch (required)")
	rev := flag.Int64("rev", 0, "first revision to report (0: from now)")
	out := flag.String("out", "-", "output file (- for stdout)")
	flag.Parse()
	if *prefix == "" {
		fmt.Fprintln(os.Stderr, "etcdwatch: --prefix is required")
		os.Exit(2)
	}
	if err := run(*endpoint, *prefix, *rev, *out); err != nil {
		fmt.Fprintln(os.Stderr, "etcdwatch:", err)
		os.Exit(1)
	}
}

func run(endpoint, prefix string, rev int64, out string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second})
	if err != nil {
		return err
	}
	defer cli.Close()

	w := os.Stdout
	if out != "-" {
		f, err := os.Create(out)
		if err != nil {
			return err
		}
		defer f.Close()
		w = f
	}
	buf := bufio.NewWriter(w)
	defer buf.Flush()
	enc := json.NewEncoder(buf)

	opts := []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithCreatedNotify()}
	if rev > 0 {
		opts = append(opts, clientv3.WithRev(rev))
	}
	for resp := range cli.Watch(clientv3.WithRequireLeader(ctx), prefix, opts...) {
		if resp.Created {
			fmt.Fprintln(os.Stderr, "watching")
			continue
		}
		if err := resp.Err(); err != nil {
			return err
		}
		for _, ev := range resp.Events {
			typ := "PUT"
			if ev.Type == clientv3.EventTypeDelete {
				typ = "DELETE"
			}
			if err := enc.Encode(event{string(ev.Kv.Key), typ, ev.Kv.ModRevision, ev.Kv.CreateRevision}); err != nil {
				return err
			}
		}
		// Every batch reaches the file at once: the bench reads it while this runs.
		if err := buf.Flush(); err != nil {
			return err
		}
	}
	if ctx.Err() == nil {
		return fmt.Errorf("watch channel closed before a signal")
	}
	return nil
}
