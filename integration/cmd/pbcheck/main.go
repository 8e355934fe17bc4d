// Command pbcheck reads Kubernetes protobuf as client-go reads it, for the
// end-to-end tests of watchmux's protobuf answers.
//
// pbcheck decode: reads a protobuf watch stream (4-byte big-endian length,
// then a WatchEvent, as kube-apiserver writes application/vnd.kubernetes.protobuf;stream=watch)
// from stdin and decodes it with client-go's own watch decoder (the
// length-delimited framer, the protobuf RawSerializer for the WatchEvent and
// client-go's scheme codecs for the object, meta/v1 Status and
// PartialObjectMetadata included). Prints one JSON line per event:
// {"type":"ADDED","object":{...}} with the decoded Go object marshalled to JSON.
// Exits 1 on anything it cannot decode.
//
// pbcheck metadata --direct KUBECONFIG --via KUBECONFIG --namespace NS --count N:
// runs two client-go metadata informers (k8s.io/client-go/metadata and
// metadatainformer, which ask for PartialObjectMetadata in protobuf) on the
// ConfigMaps of NS, one straight at the API server and one through the
// endpoint of --via (watchmux), waits for both to sync, then creates N
// ConfigMaps, updates the first and deletes the second with a client of its
// own straight at the API server. Succeeds when both informers saw the same
// sequence of (event, name, resourceVersion), and that sequence holds every
// change. Prints {"events":N,"ok":true,"sequence":[...]} (with "direct" and
// "via" when they differ) and exits 0, else 1.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"reflect"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/runtime/serializer/streaming"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/rest"
	restclientwatch "k8s.io/client-go/rest/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
)

func main() {
	if len(os.Args) < 2 {
		fatalf("usage: pbcheck decode | pbcheck metadata --direct KUBECONFIG --via KUBECONFIG --namespace NS [--count N]")
	}
	switch os.Args[1] {
	case "decode":
		decode(os.Stdin, os.Stdout)
	case "metadata":
		fs := flag.NewFlagSet("metadata", flag.ExitOnError)
		direct := fs.String("direct", "", "kubeconfig of the API server")
		via := fs.String("via", "", "kubeconfig of the endpoint under test (watchmux)")
		ns := fs.String("namespace", "pbcheck", "namespace to work in")
		count := fs.Int("count", 3, "ConfigMaps to create")
		timeout := fs.Duration("timeout", 60*time.Second, "how long to wait for both informers")
		_ = fs.Parse(os.Args[2:])
		os.Exit(metadataCheck(*direct, *via, *ns, *count, *timeout))
	default:
		fatalf("unknown mode %q", os.Args[1])
	}
}

// decode prints every event of a protobuf watch stream as client-go decodes it.
func decode(in io.Reader, out io.Writer) {
	raw := protobuf.NewRawSerializer(scheme.Scheme, scheme.Scheme)
	framer := protobuf.LengthDelimitedFramer.NewFrameReader(io.NopCloser(in))
	events := restclientwatch.NewDecoder(streaming.NewDecoder(framer, raw), scheme.Codecs.UniversalDeserializer())
	enc := json.NewEncoder(out)
	for {
		typ, obj, err := events.Decode()
		if err == io.EOF {
			return
		}
		if err != nil {
			fatalf("decoding a watch event: %v", err)
		}
		if err := enc.Encode(map[string]any{"type": string(typ), "object": obj}); err != nil {
			fatalf("writing: %v", err)
		}
	}
}

func restConfig(path, agent string) *rest.Config {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = path
	config, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, nil).ClientConfig()
	if err != nil {
		fatalf("loading kubeconfig %s: %v", path, err)
	}
	config.UserAgent = agent
	config.QPS, config.Burst = 100, 200
	return config
}

// recorder keeps what one informer's handlers saw.
type recorder struct {
	mu  sync.Mutex
	seq []string
}

func (r *recorder) add(op string, obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
		op += "(final-state-unknown)"
	}
	m, ok := obj.(*metav1.PartialObjectMetadata)
	if !ok {
		r.mu.Lock()
		r.seq = append(r.seq, fmt.Sprintf("%s %T", op, obj))
		r.mu.Unlock()
		return
	}
	r.mu.Lock()
	r.seq = append(r.seq, fmt.Sprintf("%s %s %s", op, m.Name, m.ResourceVersion))
	r.mu.Unlock()
}

func (r *recorder) snapshot() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.seq...)
}

func startInformer(ctx context.Context, path, ns string) *recorder {
	client, err := metadata.NewForConfig(restConfig(path, "pbcheck-metadata"))
	if err != nil {
		fatalf("metadata client: %v", err)
	}
	factory := metadatainformer.NewFilteredSharedInformerFactory(client, 0, ns, nil)
	informer := factory.ForResource(schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}).Informer()
	rec := &recorder{}
	_, _ = informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { rec.add("add", obj) },
		UpdateFunc: func(_, obj any) { rec.add("update", obj) },
		DeleteFunc: func(obj any) { rec.add("delete", obj) },
	})
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		fatalf("the informer through %s did not sync", path)
	}
	return rec
}

func metadataCheck(directPath, viaPath, ns string, count int, timeout time.Duration) int {
	ctx, cancel := context.WithTimeout(context.Background(), timeout+30*time.Second)
	defer cancel()
	client, err := kubernetes.NewForConfig(restConfig(directPath, "pbcheck-writer"))
	if err != nil {
		fatalf("client: %v", err)
	}
	_, err = client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		fatalf("creating namespace %s: %v", ns, err)
	}
	direct := startInformer(ctx, directPath, ns)
	via := startInformer(ctx, viaPath, ns)

	var want []string
	cms := client.CoreV1().ConfigMaps(ns)
	for i := 0; i < count; i++ {
		cm, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("m%d", i)}, Data: map[string]string{"i": "0"}}, metav1.CreateOptions{})
		if err != nil {
			fatalf("create: %v", err)
		}
		want = append(want, fmt.Sprintf("add %s %s", cm.Name, cm.ResourceVersion))
	}
	cm, err := cms.Get(ctx, "m0", metav1.GetOptions{})
	if err != nil {
		fatalf("get: %v", err)
	}
	cm.Data["i"] = "1"
	if cm, err = cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		fatalf("update: %v", err)
	}
	want = append(want, fmt.Sprintf("update m0 %s", cm.ResourceVersion))
	if count > 1 {
		if err := cms.Delete(ctx, "m1", metav1.DeleteOptions{}); err != nil {
			fatalf("delete: %v", err)
		}
		// The informer's delete carries the last state it had (update RV, or the
		// deletion's own version from the DELETED event): whichever, both must agree.
		want = append(want, "delete m1")
	}

	deadline := time.Now().Add(timeout)
	var d, v []string
	for time.Now().Before(deadline) {
		d, v = direct.snapshot(), via.snapshot()
		if len(d) >= len(want) && len(v) >= len(want) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Let a stray extra event (there should be none) show up in both.
	time.Sleep(500 * time.Millisecond)
	d, v = direct.snapshot(), via.snapshot()
	ok := reflect.DeepEqual(d, v) && len(d) == len(want)
	for i := 0; ok && i < len(want); i++ {
		if want[i] == "delete m1" {
			ok = len(d[i]) > len("delete m1 ") && d[i][:len("delete m1 ")] == "delete m1 "
		} else {
			ok = d[i] == want[i]
		}
	}
	out := map[string]any{"ok": ok, "events": len(d), "sequence": d}
	if !ok {
		out["direct"], out["via"], out["want"] = d, v, want
	}
	_ = json.NewEncoder(os.Stdout).Encode(out)
	if !ok {
		return 1
	}
	return 0
}

func fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "pbcheck: "+format+"\n", args...)
	os.Exit(2)
}
