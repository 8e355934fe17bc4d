// Command watchcheck proves that an ordinary client-go program can list and
// watch through a Kubernetes API endpoint: the real kube-apiserver, or the
// watchmux proxy in front of it (point --kubeconfig at a kubeconfig whose
// server is the proxy).
//
// Default mode: run a shared ConfigMap informer in --namespace (created if
// missing), wait for it to sync, then create, update and delete --count
// ConfigMaps. Succeeds when, within --timeout, the informer has seen for every
// object exactly add(create RV), update(create RV -> update RV), delete, in
// that order, and its store is empty again. Prints one JSON line
// {"adds":N,"updates":N,"deletes":N,"ok":true} and exits 0; otherwise prints
// the same line with "ok":false and what was missing or wrong, and exits 1.
//
// --list-only: a plain paginated List (limit 5) of the namespace's ConfigMaps;
// prints one name per line.
//
// client-go's informers use watch-list (sendInitialEvents) by default; run with
// KUBE_FEATURE_WatchListClient=false to exercise the classic list+watch path.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
)

const managedByLabel = "app.kubernetes.io/managed-by"

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig to use (default: $KUBECONFIG, then ~/.kube/config)")
	namespace := flag.String("namespace", "watchcheck", "namespace to work in")
	count := flag.Int("count", 20, "number of ConfigMaps to create, update and delete")
	listOnly := flag.Bool("list-only", false, "only list the namespace's ConfigMaps (paginated, limit 5) and print their names")
	timeout := flag.Duration("timeout", 60*time.Second, "how long to wait for the informer to see all events")
	flag.Parse()

	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = *kubeconfig
	config, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, nil).ClientConfig()
	if err != nil {
		fatalf("loading kubeconfig: %v", err)
	}
	config.UserAgent = "watchcheck"
	config.QPS, config.Burst = 100, 200 // client-go's default of 5 QPS would make this slow
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		fatalf("creating client: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout+60*time.Second)
	defer cancel()

	if *listOnly {
		listNames(ctx, client, *namespace)
		return
	}
	os.Exit(check(ctx, client, *namespace, *count, *timeout))
}

// listNames prints the names of all ConfigMaps in ns, fetched 5 at a time.
func listNames(ctx context.Context, client kubernetes.Interface, ns string) {
	opts := metav1.ListOptions{Limit: 5}
	pages, items := 0, 0
	for {
		list, err := client.CoreV1().ConfigMaps(ns).List(ctx, opts)
		if err != nil {
			fatalf("listing configmaps in %s (page %d): %v", ns, pages+1, err)
		}
		pages++
		for _, cm := range list.Items {
			fmt.Println(cm.Name)
			items++
		}
		if list.Continue == "" {
			break
		}
		opts.Continue = list.Continue
	}
	fmt.Fprintf(os.Stderr, "watchcheck: listed %d configmaps in %d pages\n", items, pages)
}

// event is one informer notification for one ConfigMap.
type event struct {
	kind      string // "add", "update" or "delete"
	rv        string // resourceVersion of the (new) object
	oldRV     string // update only: resourceVersion of the old object
	uid       string
	tombstone bool // delete only: seen as DeletedFinalStateUnknown (after a relist)
}

func (e event) String() string {
	switch e.kind {
	case "update":
		return fmt.Sprintf("update(%s->%s)", e.oldRV, e.rv)
	case "delete":
		if e.tombstone {
			return fmt.Sprintf("delete(tombstone,%s)", e.rv)
		}
		return fmt.Sprintf("delete(%s)", e.rv)
	}
	return fmt.Sprintf("%s(%s)", e.kind, e.rv)
}

type recorder struct {
	mu     sync.Mutex
	events map[string][]event // by ConfigMap name, in arrival order
	noops  int                // updates with an unchanged resourceVersion (relists)
}

func (r *recorder) record(obj interface{}, e event) {
	cm, ok := obj.(*corev1.ConfigMap)
	if !ok {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if e.kind == "update" && e.oldRV == e.rv {
		r.noops++
		return
	}
	e.uid = string(cm.UID)
	if e.kind != "update" {
		e.rv = cm.ResourceVersion
	}
	r.events[cm.Name] = append(r.events[cm.Name], e)
}

func (r *recorder) handler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj interface{}) { r.record(obj, event{kind: "add"}) },
		UpdateFunc: func(oldObj, newObj interface{}) {
			o, ok1 := oldObj.(*corev1.ConfigMap)
			n, ok2 := newObj.(*corev1.ConfigMap)
			if ok1 && ok2 {
				r.record(n, event{kind: "update", oldRV: o.ResourceVersion, rv: n.ResourceVersion})
			}
		},
		DeleteFunc: func(obj interface{}) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				r.record(t.Obj, event{kind: "delete", tombstone: true})
				return
			}
			r.record(obj, event{kind: "delete"})
		},
	}
}

// written is what our own writes returned for one ConfigMap.
type written struct {
	name, uid, createRV, updateRV string
}

type summary struct {
	Adds    int      `json:"adds"`
	Updates int      `json:"updates"`
	Deletes int      `json:"deletes"`
	OK      bool     `json:"ok"`
	Missing []string `json:"missing,omitempty"`
	Wrong   []string `json:"wrong,omitempty"`
	Store   []string `json:"store,omitempty"` // objects still in the informer store
}

// verify compares what the informer saw with what we wrote. Missing events
// may still arrive; wrong ones (unexpected, out of order, other RVs) will not
// be fixed by waiting.
func (r *recorder) verify(objs []written, store []string) summary {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := summary{Store: store}
	for _, w := range objs {
		want := []event{
			{kind: "add", rv: w.createRV},
			{kind: "update", oldRV: w.createRV, rv: w.updateRV},
			{kind: "delete"},
		}
		got := r.events[w.name]
		for i, g := range got {
			if i >= len(want) || g.kind != want[i].kind || g.uid != w.uid ||
				(g.kind == "add" && g.rv != w.createRV) ||
				(g.kind == "update" && (g.oldRV != w.createRV || g.rv != w.updateRV)) {
				s.Wrong = append(s.Wrong, fmt.Sprintf("%s: saw %v, want %v (uid %s)", w.name, got, want, w.uid))
				break
			}
			switch g.kind {
			case "add":
				s.Adds++
			case "update":
				s.Updates++
			case "delete":
				s.Deletes++
			}
		}
		for _, m := range want[min(len(got), len(want)):] {
			s.Missing = append(s.Missing, fmt.Sprintf("%s: %v", w.name, m))
		}
	}
	s.OK = len(s.Missing) == 0 && len(s.Wrong) == 0 && len(s.Store) == 0
	return s
}

func check(ctx context.Context, client kubernetes.Interface, ns string, count int, timeout time.Duration) int {
	cms := client.CoreV1().ConfigMaps(ns)
	ensureNamespace(ctx, client, ns)
	// Leftovers of an earlier failed run would stay in the store; remove them
	// before the informer starts.
	existing, err := cms.List(ctx, metav1.ListOptions{})
	if err != nil {
		fatalf("listing configmaps in %s: %v", ns, err)
	}
	for _, cm := range existing.Items {
		if cm.Labels[managedByLabel] == "watchcheck" {
			if err := cms.Delete(ctx, cm.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				fatalf("deleting leftover configmap %s/%s: %v", ns, cm.Name, err)
			}
		}
	}

	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(ns))
	informer := factory.Core().V1().ConfigMaps().Informer()
	rec := &recorder{events: map[string][]event{}}
	reg, err := informer.AddEventHandler(rec.handler())
	if err != nil {
		fatalf("adding event handler: %v", err)
	}
	stop := make(chan struct{})
	defer func() { close(stop); factory.Shutdown() }()
	factory.Start(stop)
	syncCtx, syncCancel := context.WithTimeout(ctx, timeout)
	defer syncCancel()
	if !cache.WaitForCacheSync(syncCtx.Done(), informer.HasSynced, reg.HasSynced) {
		fatalf("informer did not sync within %v", timeout)
	}
	if n := len(informer.GetStore().ListKeys()); n != 0 {
		fmt.Fprintf(os.Stderr, "watchcheck: note: %d configmaps already in %s; the store will not end empty\n", n, ns)
	}

	// Three phases, as a client would: create all, update all, delete all.
	// Updates and deletes carry the resourceVersion (and UID) our previous
	// write returned, so they fail if anything else touched the object.
	run := rand.String(6)
	objs := make([]written, count)
	for i := range objs {
		cm := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{
				Name:   fmt.Sprintf("watchcheck-%s-%03d", run, i),
				Labels: map[string]string{managedByLabel: "watchcheck", "watchcheck/run": run},
			},
			Data: map[string]string{"step": "created"},
		}
		created, err := cms.Create(ctx, cm, metav1.CreateOptions{})
		if err != nil {
			fatalf("creating configmap %s: %v", cm.Name, err)
		}
		objs[i] = written{name: created.Name, uid: string(created.UID), createRV: created.ResourceVersion}
	}
	for i, w := range objs {
		cm := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: w.name, ResourceVersion: w.createRV,
				Labels: map[string]string{managedByLabel: "watchcheck", "watchcheck/run": run}},
			Data: map[string]string{"step": "updated"},
		}
		updated, err := cms.Update(ctx, cm, metav1.UpdateOptions{})
		if err != nil {
			fatalf("updating configmap %s: %v", w.name, err)
		}
		objs[i].updateRV = updated.ResourceVersion
	}
	for _, w := range objs {
		uid, rv := types.UID(w.uid), w.updateRV
		pre := &metav1.Preconditions{UID: &uid, ResourceVersion: &rv}
		if err := cms.Delete(ctx, w.name, metav1.DeleteOptions{Preconditions: pre}); err != nil {
			fatalf("deleting configmap %s: %v", w.name, err)
		}
	}

	deadline := time.Now().Add(timeout)
	var s summary
	for {
		s = rec.verify(objs, informer.GetStore().ListKeys())
		if s.OK || len(s.Wrong) > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if rec.noops > 0 {
		fmt.Fprintf(os.Stderr, "watchcheck: note: %d no-op updates (relist or resync)\n", rec.noops)
	}
	line, _ := json.Marshal(s)
	fmt.Println(string(line))
	if !s.OK {
		return 1
	}
	return 0
}

func ensureNamespace(ctx context.Context, client kubernetes.Interface, ns string) {
	got, err := client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = client.CoreV1().Namespaces().Create(ctx,
			&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			err = nil
		}
	} else if err == nil && got.Status.Phase == corev1.NamespaceTerminating {
		err = fmt.Errorf("namespace is terminating (no controller-manager will finish it); use another one")
	}
	if err != nil {
		fatalf("namespace %s: %v", ns, err)
	}
}

func fatalf(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, "watchcheck: "+format+"\n", args...)
	os.Exit(1)
}
