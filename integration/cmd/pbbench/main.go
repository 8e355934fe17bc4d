// Command pbbench drives the protobuf benchmarks (integration/scripts/bench-protobuf.sh):
//
//	pbbench populate --kubeconfig KC --namespace NS --count N
//	    creates N pods (Pending: the test cluster has no scheduler) straight at the API server.
//	pbbench informer --kubeconfig KC --namespace NS --content json|protobuf --updates M
//	    runs a client-go typed pod informer asking for that content type, prints
//	    {"phase":"synced",...} once synced, then waits for M update events and prints
//	    {"phase":"done","sync_cpu_s":..,"updates_cpu_s":..} (its own CPU, getrusage).
//	pbbench churn --kubeconfig KC --namespace NS --updates M [--pods P]
//	    patches a label of M pods (round robin over the first P), 8 at a time.
//	pbbench watchers --url URL --n N --accept ACCEPT --events K
//	    opens N plain HTTP/1.1 watches of URL (no bookmarks), prints "connected" when every
//	    one has its headers, and exits once each has received K events (JSON lines or
//	    length-prefixed protobuf frames), printing {"bytes":..,"events":..}.
package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
)

func main() {
	if len(os.Args) < 2 {
		fatalf("usage: pbbench populate|informer|churn|watchers ...")
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig")
	ns := fs.String("namespace", "bench-pb", "namespace")
	count := fs.Int("count", 10000, "pods to create")
	content := fs.String("content", "protobuf", "json or protobuf")
	updates := fs.Int("updates", 1000, "updates to make or to wait for")
	pods := fs.Int("pods", 1000, "churn: pods to update, round robin")
	url := fs.String("url", "", "watchers: the watch URL")
	n := fs.Int("n", 1000, "watchers: how many")
	accept := fs.String("accept", "application/json", "watchers: Accept header")
	events := fs.Int("events", 100, "watchers: events each must receive")
	timeout := fs.Duration("timeout", 10*time.Minute, "give up after")
	_ = fs.Parse(os.Args[2:])
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	switch os.Args[1] {
	case "populate":
		populate(ctx, clientset(*kubeconfig, "application/vnd.kubernetes.protobuf"), *ns, *count)
	case "informer":
		informer(ctx, *kubeconfig, *ns, *content, *updates)
	case "churn":
		churn(ctx, clientset(*kubeconfig, "application/vnd.kubernetes.protobuf"), *ns, *updates, *pods)
	case "watchers":
		watchers(ctx, *url, *n, *accept, *events)
	default:
		fatalf("unknown mode %q", os.Args[1])
	}
}

func restConfig(path string) *rest.Config {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = path
	config, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, nil).ClientConfig()
	if err != nil {
		fatalf("kubeconfig %s: %v", path, err)
	}
	config.UserAgent = "pbbench"
	config.QPS, config.Burst = 1000, 2000
	return config
}

func clientset(path, contentType string) *kubernetes.Clientset {
	config := restConfig(path)
	config.ContentType = contentType
	if contentType == "application/json" {
		config.AcceptContentTypes = "application/json"
	} else {
		config.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	}
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		fatalf("client: %v", err)
	}
	return client
}

func pod(i int) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:        fmt.Sprintf("p-%05d", i),
			Labels:      map[string]string{"app": "bench", "shard": fmt.Sprint(i % 16)},
			Annotations: map[string]string{"bench.watchmux.io/note": "a pod of the protobuf benchmark"},
		},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name:    "app",
				Image:   "registry.k8s.io/pause:3.10",
				Command: []string{"/pause"},
				Env:     []corev1.EnvVar{{Name: "A", Value: "1"}, {Name: "POD", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}},
				Ports:   []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("16Mi")},
					Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")},
				},
				ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstrFromString("http")}}},
			}},
			Tolerations: []corev1.Toleration{{Key: "node.kubernetes.io/not-ready", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute}},
		},
	}
}

func populate(ctx context.Context, client *kubernetes.Clientset, ns string, count int) {
	_, _ = client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	work := make(chan int)
	var wg sync.WaitGroup
	var failed atomic.Int64
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				if _, err := client.CoreV1().Pods(ns).Create(ctx, pod(i), metav1.CreateOptions{}); err != nil && !strings.Contains(err.Error(), "already exists") {
					failed.Add(1)
					fmt.Fprintf(os.Stderr, "create %d: %v\n", i, err)
				}
			}
		}()
	}
	start := time.Now()
	for i := 0; i < count; i++ {
		work <- i
	}
	close(work)
	wg.Wait()
	if failed.Load() > 0 {
		fatalf("%d creates failed", failed.Load())
	}
	fmt.Printf("{\"created\":%d,\"seconds\":%.1f}\n", count, time.Since(start).Seconds())
}

func cpuSeconds() float64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

func informer(ctx context.Context, kubeconfig, ns, content string, want int) {
	ct := "application/vnd.kubernetes.protobuf"
	if content == "json" {
		ct = "application/json"
	}
	client := clientset(kubeconfig, ct)
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(ns))
	inf := factory.Core().V1().Pods().Informer()
	var seen atomic.Int64
	done := make(chan struct{})
	var once sync.Once
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(_, _ any) {
			if seen.Add(1) >= int64(want) {
				once.Do(func() { close(done) })
			}
		},
	})
	start := time.Now()
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		fatalf("no sync")
	}
	synced := cpuSeconds()
	out := json.NewEncoder(os.Stdout)
	_ = out.Encode(map[string]any{"phase": "synced", "content": content, "objects": len(inf.GetStore().ListKeys()), "sync_cpu_s": synced, "sync_wall_s": time.Since(start).Seconds()})
	select {
	case <-done:
	case <-ctx.Done():
		fatalf("saw %d of %d updates", seen.Load(), want)
	}
	_ = out.Encode(map[string]any{"phase": "done", "content": content, "updates": seen.Load(), "sync_cpu_s": synced, "updates_cpu_s": cpuSeconds() - synced})
}

func churn(ctx context.Context, client *kubernetes.Clientset, ns string, updates, pods int) {
	run := time.Now().UnixNano()
	work := make(chan int)
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				// A value no earlier run set: a patch that changes nothing makes no event.
				patch := fmt.Sprintf(`{"metadata":{"labels":{"gen":"g%d-%d"}}}`, run, i)
				if _, err := client.CoreV1().Pods(ns).Patch(ctx, fmt.Sprintf("p-%05d", i%pods), types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
					fatalf("patch: %v", err)
				}
			}
		}()
	}
	start := time.Now()
	for i := 0; i < updates; i++ {
		work <- i
	}
	close(work)
	wg.Wait()
	fmt.Printf("{\"updates\":%d,\"seconds\":%.1f}\n", updates, time.Since(start).Seconds())
}

func watchers(ctx context.Context, url string, n int, accept string, events int) {
	transport := &http.Transport{
		MaxIdleConnsPerHost: n, MaxConnsPerHost: 0, DisableCompression: true, ForceAttemptHTTP2: false,
		DialContext: (&net.Dialer{Timeout: 10 * time.Second}).DialContext,
	}
	client := &http.Client{Transport: transport}
	protobuf := strings.HasPrefix(accept, "application/vnd.kubernetes.protobuf")
	var bytes, got atomic.Int64
	var connected, finished sync.WaitGroup
	connected.Add(n)
	finished.Add(n)
	for i := 0; i < n; i++ {
		go func() {
			defer finished.Done()
			req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
			req.Header.Set("Accept", accept)
			resp, err := client.Do(req)
			if err != nil {
				fatalf("watch: %v", err)
			}
			connected.Done()
			if resp.StatusCode != 200 {
				fatalf("watch: %s", resp.Status)
			}
			r := bufio.NewReaderSize(resp.Body, 64<<10)
			for k := 0; k < events; k++ {
				if protobuf {
					var head [4]byte
					if _, err := io.ReadFull(r, head[:]); err != nil {
						fatalf("frame: %v", err)
					}
					size := binary.BigEndian.Uint32(head[:])
					if _, err := r.Discard(int(size)); err != nil {
						fatalf("frame: %v", err)
					}
					bytes.Add(int64(4 + size))
				} else {
					line, err := r.ReadSlice('\n')
					for err == bufio.ErrBufferFull {
						bytes.Add(int64(len(line)))
						line, err = r.ReadSlice('\n')
					}
					if err != nil {
						fatalf("line: %v", err)
					}
					bytes.Add(int64(len(line)))
				}
				got.Add(1)
			}
			resp.Body.Close()
		}()
	}
	connected.Wait()
	fmt.Println("connected")
	start := time.Now()
	finished.Wait()
	fmt.Printf("{\"watchers\":%d,\"events\":%d,\"bytes\":%d,\"seconds\":%.2f}\n", n, got.Load(), bytes.Load(), time.Since(start).Seconds())
}

func fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "pbbench: "+format+"\n", args...)
	os.Exit(1)
}

func intstrFromString(s string) intstr.IntOrString { return intstr.FromString(s) }
