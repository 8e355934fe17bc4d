// Command informers is the client-go half of the rollout bench's watchers
// (integration/scripts/bench-rollout.sh): K SharedInformerFactories, each
// with its own clientset (and so its own connection), each running one
// ConfigMap informer on one namespace with resync 0, as K controllers of a
// cluster would. Every handler call is recorded (add, update, delete; the
// object's name and resourceVersion; whether an add came from the first
// list, isInInitialList) with the wall-clock time it was made, so that the
// bench can check the events against etcd's own watch (integration/bench/
// restart/upgrade.rs's Verdict) and time when each informer had a write.
//
// Each clientset's transport is wrapped (rest.Config.Wrap) to count, after
// that informer has synced, the requests its reflector made: LISTs (a GET
// without watch=true), watches (watch=true), watch-lists (watch=true with
// sendInitialEvents=true), and 410s. A 410 comes two ways: as the status of
// a LIST or watch (counted from the status), or as a watch ERROR event with
// code 410 inside a 200 stream, which the wrapper counts by scanning the
// stream's bytes for `"code":410` (JSON is asked for, so the Status object
// is text; a ConfigMap of the bench never carries that string). A LIST or
// watch-list after the sync is a relist, whatever its cause.
//
//	informers --namespace NS [--kubeconfig FILE] [--server URL] [--informers 20]
//	          --out FILE [--duration 0] [--sync-timeout 120s]
//
// Then, whenever it rises, "rv N" on stderr: the lowest, over the informers,
// of the highest resourceVersion each was handed (the bench waits on it for
// a write to have reached every informer).
//
// --server http://host:port: an unauthenticated plain-HTTP endpoint (watchmux
// behind the bench's balancer); otherwise the kubeconfig's server and
// credentials. Prints "synced K" on stderr once every informer has synced;
// on SIGTERM or SIGINT (or after --duration, if not 0) it stops the
// informers and writes one JSON summary to --out, then exits 0.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
)

// event is one handler call.
type event struct {
	Type            string `json:"type"` // add, update, delete
	Name            string `json:"name"`
	ResourceVersion string `json:"rv"`
	InInitialList   bool   `json:"initial,omitempty"`
	// Tombstone: a delete handed a DeletedFinalStateUnknown (the informer
	// missed the deletion and learnt of it from a relist).
	Tombstone bool  `json:"tombstone,omitempty"`
	UnixMilli int64 `json:"t_ms"`
}

// counts are the requests one informer's reflector made after its sync.
type counts struct {
	synced     atomic.Bool
	lists      atomic.Int64
	watches    atomic.Int64
	watchLists atomic.Int64
	gone       atomic.Int64
}

// informerSummary is one informer's part of the output.
type informerSummary struct {
	Index int `json:"index"`
	// The informer's resourceVersion when it was seen synced: events after
	// it are owed to it (those between the list and this were received
	// before the bench looks, and are not counted either way).
	SyncedResourceVersion string  `json:"synced_rv"`
	Lists                 int64   `json:"lists_after_sync"`
	Watches               int64   `json:"watches_after_sync"`
	WatchLists            int64   `json:"watch_lists_after_sync"`
	Relists               int64   `json:"relists_after_sync"`
	Gone                  int64   `json:"gone_410_after_sync"`
	Events                []event `json:"events"`
}

type summary struct {
	Namespace string            `json:"namespace"`
	Server    string            `json:"server"`
	Informers []informerSummary `json:"informers"`
}

// countingTransport counts one informer's requests once it has synced.
type countingTransport struct {
	next http.RoundTripper
	c    *counts
}

func (t *countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	q := req.URL.Query()
	watch := q.Get("watch") == "true" || q.Get("watch") == "1"
	after := t.c.synced.Load()
	if after && req.Method == http.MethodGet {
		switch {
		case watch && q.Get("sendInitialEvents") == "true":
			t.c.watchLists.Add(1)
		case watch:
			t.c.watches.Add(1)
		default:
			t.c.lists.Add(1)
		}
	}
	resp, err := t.next.RoundTrip(req)
	if err != nil || !after {
		return resp, err
	}
	if resp.StatusCode == http.StatusGone {
		t.c.gone.Add(1)
	} else if watch && resp.Body != nil {
		resp.Body = &goneScanner{ReadCloser: resp.Body, c: t.c}
	}
	return resp, err
}

// goneScanner counts `"code":410` in a watch stream (an ERROR event's
// Status), keeping the tail of each read so a match split across two reads
// is found once.
type goneScanner struct {
	io.ReadCloser
	c    *counts
	tail []byte
}

var goneCode = []byte(`"code":410`)

func (g *goneScanner) Read(p []byte) (int, error) {
	n, err := g.ReadCloser.Read(p)
	if n > 0 {
		buf := append(g.tail, p[:n]...)
		g.c.gone.Add(int64(bytes.Count(buf, goneCode)))
		// Keep fewer bytes than a whole match, so no match is counted twice.
		keep := len(goneCode) - 1
		if len(buf) < keep {
			keep = len(buf)
		}
		g.tail = append([]byte(nil), buf[len(buf)-keep:]...)
	}
	return n, err
}

// recorder is one informer's handler: every call, in order, and the
// highest resourceVersion among them.
type recorder struct {
	mu     sync.Mutex
	events []event
	maxRV  uint64
}

// highest is the highest resourceVersion the handler was given, or floor.
func (r *recorder) highest(floor uint64) uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.maxRV > floor {
		return r.maxRV
	}
	return floor
}

func (r *recorder) record(typ string, obj interface{}, initial bool) {
	tombstone := false
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj, tombstone = t.Obj, true
	}
	cm, ok := obj.(*corev1.ConfigMap)
	if !ok {
		return
	}
	e := event{typ, cm.Name, cm.ResourceVersion, initial, tombstone, time.Now().UnixMilli()}
	rv, _ := strconv.ParseUint(cm.ResourceVersion, 10, 64)
	r.mu.Lock()
	r.events = append(r.events, e)
	if rv > r.maxRV {
		r.maxRV = rv
	}
	r.mu.Unlock()
}

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig (its server and credentials)")
	server := flag.String("server", "", "plain-HTTP server without credentials instead (watchmux)")
	namespace := flag.String("namespace", "", "namespace whose ConfigMaps to watch (required)")
	k := flag.Int("informers", 20, "informer factories, each with its own connection")
	out := flag.String("out", "", "summary file (required)")
	duration := flag.Duration("duration", 0, "stop after this long (0: at SIGTERM or SIGINT)")
	syncTimeout := flag.Duration("sync-timeout", 120*time.Second, "give up when not all have synced by then")
	flag.Parse()
	if *namespace == "" || *out == "" || *k < 1 {
		fmt.Fprintln(os.Stderr, "informers: --namespace, --out and --informers >= 1 are required")
		os.Exit(2)
	}
	if err := run(*kubeconfig, *server, *namespace, *k, *out, *duration, *syncTimeout); err != nil {
		fmt.Fprintln(os.Stderr, "informers:", err)
		os.Exit(1)
	}
}

func baseConfig(kubeconfig, server string) (*rest.Config, error) {
	if server != "" {
		return &rest.Config{Host: server}, nil
	}
	return clientcmd.BuildConfigFromFlags("", kubeconfig)
}

func run(kubeconfig, server, namespace string, k int, out string, duration, syncTimeout time.Duration) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, duration)
		defer cancel()
	}
	base, err := baseConfig(kubeconfig, server)
	if err != nil {
		return err
	}
	// JSON, so a 410 inside a watch stream can be found as text.
	base.ContentType = "application/json"
	base.AcceptContentTypes = "application/json"
	base.QPS, base.Burst = -1, 0 // the informers' own requests are few; no client-side throttling

	informerCtx, stopInformers := context.WithCancel(context.Background())
	defer stopInformers()
	all := make([]*counts, k)
	recs := make([]*recorder, k)
	infs := make([]cache.SharedIndexInformer, k)
	for i := 0; i < k; i++ {
		c := &counts{}
		cfg := rest.CopyConfig(base)
		cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return &countingTransport{next: rt, c: c} })
		cfg.UserAgent = "informers/" + strconv.Itoa(i)
		// A Proxy function of its own keeps this clientset's transport (and
		// so its connections) its own: client-go otherwise hands every
		// config of the same TLS settings one shared transport, and a
		// plain-HTTP config http.DefaultTransport. It proxies nothing.
		cfg.Proxy = func(*http.Request) (*url.URL, error) { return nil, nil }
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return err
		}
		factory := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(namespace))
		inf := factory.Core().V1().ConfigMaps().Informer()
		rec := &recorder{}
		if _, err := inf.AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{
			AddFunc:    func(obj interface{}, initial bool) { rec.record("add", obj, initial) },
			UpdateFunc: func(_, obj interface{}) { rec.record("update", obj, false) },
			DeleteFunc: func(obj interface{}) { rec.record("delete", obj, false) },
		}); err != nil {
			return err
		}
		factory.Start(informerCtx.Done())
		all[i], recs[i], infs[i] = c, rec, inf
	}

	// Each informer's counting starts the moment it is seen synced.
	synced := make([]string, k)
	deadline := time.Now().Add(syncTimeout)
	for pending := k; pending > 0; {
		for i, inf := range infs {
			if !all[i].synced.Load() && inf.HasSynced() {
				synced[i] = inf.LastSyncResourceVersion()
				all[i].synced.Store(true)
				pending--
			}
		}
		if pending == 0 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d informers not synced after %s", pending, k, syncTimeout)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("stopped before every informer synced")
		case <-time.After(20 * time.Millisecond):
		}
	}
	fmt.Fprintf(os.Stderr, "synced %d\n", k)
	reportProgress(ctx, recs, synced)
	stopInformers()
	s := summary{Namespace: namespace, Server: base.Host}
	for i := range infs {
		c := all[i]
		recs[i].mu.Lock()
		s.Informers = append(s.Informers, informerSummary{
			Index:                 i,
			SyncedResourceVersion: synced[i],
			Lists:                 c.lists.Load(),
			Watches:               c.watches.Load(),
			WatchLists:            c.watchLists.Load(),
			Relists:               c.lists.Load() + c.watchLists.Load(),
			Gone:                  c.gone.Load(),
			Events:                recs[i].events,
		})
		recs[i].mu.Unlock()
	}
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	if err := json.NewEncoder(f).Encode(s); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// reportProgress prints "rv N" whenever the lowest of the informers' highest
// resourceVersions rises, until ctx ends.
func reportProgress(ctx context.Context, recs []*recorder, synced []string) {
	floors := make([]uint64, len(recs))
	for i, rv := range synced {
		floors[i], _ = strconv.ParseUint(rv, 10, 64)
	}
	var last uint64
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		lowest := uint64(0)
		for i, r := range recs {
			if h := r.highest(floors[i]); i == 0 || h < lowest {
				lowest = h
			}
		}
		if lowest > last {
			last = lowest
			fmt.Fprintf(os.Stderr, "rv %d\n", lowest)
		}
	}
}
