// Command difftest is the client-go half of watchmux's differential test:
// the same informers run against the API server directly and through
// watchmux while one sequence of creates, updates, label transitions and
// deletes is written; the event sequences (type, name, resourceVersion) each
// informer sees, and its final store, must be identical on both sides.
//
// Two informers per side: every configmap of the namespace, and those with
// label app=x, so that objects moving in and out of a selector are covered.
// Prints one JSON summary line; exits 1 on any difference.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"reflect"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
)

type seen struct {
	Type string `json:"type"`
	Name string `json:"name"`
	RV   string `json:"rv"`
}

type recorder struct {
	mu     sync.Mutex
	events []seen
}

func (r *recorder) add(t string, obj interface{}) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
		t = "DELETED_UNKNOWN"
	}
	cm := obj.(*corev1.ConfigMap)
	r.mu.Lock()
	r.events = append(r.events, seen{t, cm.Name, cm.ResourceVersion})
	r.mu.Unlock()
}

func (r *recorder) snapshot() []seen {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]seen(nil), r.events...)
}

type side struct {
	name      string
	informers map[string]cache.SharedIndexInformer
	recorders map[string]*recorder
}

func client(path string) *kubernetes.Clientset {
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		fail("kubeconfig %s: %v", path, err)
	}
	return kubernetes.NewForConfigOrDie(cfg)
}

func startSide(ctx context.Context, name, kubeconfig, ns string) *side {
	cs := client(kubeconfig)
	s := &side{name: name, informers: map[string]cache.SharedIndexInformer{}, recorders: map[string]*recorder{}}
	for _, sel := range []string{"", "app=x"} {
		sel := sel
		f := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(ns),
			informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = sel }))
		inf := f.Core().V1().ConfigMaps().Informer()
		rec := &recorder{}
		_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(o interface{}) { rec.add("ADDED", o) },
			UpdateFunc: func(_, o interface{}) { rec.add("MODIFIED", o) },
			DeleteFunc: func(o interface{}) { rec.add("DELETED", o) },
		})
		key := sel
		if key == "" {
			key = "all"
		}
		s.informers[key] = inf
		s.recorders[key] = rec
		go inf.Run(ctx.Done())
	}
	for key, inf := range s.informers {
		if !cache.WaitForCacheSync(ctxTimeout(ctx, 60*time.Second), inf.HasSynced) {
			fail("%s informer %s did not sync", name, key)
		}
	}
	return s
}

func ctxTimeout(ctx context.Context, d time.Duration) <-chan struct{} {
	c, cancel := context.WithTimeout(ctx, d)
	go func() { <-c.Done(); cancel() }()
	return c.Done()
}

func fail(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, "difftest: "+format+"\n", args...)
	os.Exit(1)
}

func storeNames(inf cache.SharedIndexInformer) []string {
	var names []string
	for _, o := range inf.GetStore().List() {
		cm := o.(*corev1.ConfigMap)
		names = append(names, cm.Name+"@"+cm.ResourceVersion)
	}
	sort.Strings(names)
	return names
}

func main() {
	direct := flag.String("direct", "", "kubeconfig of the API server")
	proxy := flag.String("proxy", "", "kubeconfig of watchmux")
	ns := flag.String("namespace", "", "namespace to use (created if missing)")
	flag.Parse()
	if *direct == "" || *proxy == "" || *ns == "" {
		fail("--direct, --proxy and --namespace are required")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	writer := client(*direct).CoreV1()
	nsObj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: *ns}}
	if _, err := client(*direct).CoreV1().Namespaces().Create(ctx, nsObj, metav1.CreateOptions{}); err != nil {
		fmt.Fprintf(os.Stderr, "difftest: namespace: %v (continuing)\n", err)
	}

	sides := []*side{startSide(ctx, "direct", *direct, *ns), startSide(ctx, "watchmux", *proxy, *ns)}

	cms := writer.ConfigMaps(*ns)
	mk := func(name, app string) {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": app}},
			Data: map[string]string{"v": "0"}}
		if _, err := cms.Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			fail("create %s: %v", name, err)
		}
	}
	update := func(name string, mutate func(*corev1.ConfigMap)) {
		cm, err := cms.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			fail("get %s: %v", name, err)
		}
		mutate(cm)
		if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
			fail("update %s: %v", name, err)
		}
	}
	del := func(name string) {
		if err := cms.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			fail("delete %s: %v", name, err)
		}
	}
	// The sequence: creates, a data change, moves in and out of app=x, deletes.
	mk("a", "x")
	mk("b", "y")
	mk("c", "x")
	update("a", func(cm *corev1.ConfigMap) { cm.Data["v"] = "1" })
	update("a", func(cm *corev1.ConfigMap) { cm.Labels["app"] = "y" }) // leaves app=x
	update("b", func(cm *corev1.ConfigMap) { cm.Labels["app"] = "x" }) // enters app=x
	update("b", func(cm *corev1.ConfigMap) { cm.Data["v"] = "2" })
	del("c")
	del("a")
	mk("d", "x")

	// Wait (bounded) until every informer's store matches the API server's state.
	want := map[string][]string{}
	for key, sel := range map[string]string{"all": "", "app=x": "app=x"} {
		list, err := cms.List(ctx, metav1.ListOptions{LabelSelector: sel})
		if err != nil {
			fail("list: %v", err)
		}
		var names []string
		for _, cm := range list.Items {
			names = append(names, cm.Name+"@"+cm.ResourceVersion)
		}
		sort.Strings(names)
		want[key] = names
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		converged := true
		for _, s := range sides {
			for key, inf := range s.informers {
				if !reflect.DeepEqual(storeNames(inf), want[key]) {
					converged = false
				}
			}
		}
		if converged {
			break
		}
		if time.Now().After(deadline) {
			for _, s := range sides {
				for key, inf := range s.informers {
					fmt.Fprintf(os.Stderr, "%s %s store %v, want %v\n", s.name, key, storeNames(inf), want[key])
				}
			}
			fail("stores did not converge")
		}
		time.Sleep(50 * time.Millisecond)
	}

	summary := map[string]interface{}{"ok": true}
	for _, key := range []string{"all", "app=x"} {
		d, p := sides[0].recorders[key].snapshot(), sides[1].recorders[key].snapshot()
		summary[key] = len(d)
		if !reflect.DeepEqual(d, p) {
			summary["ok"] = false
			summary["direct_"+key] = d
			summary["watchmux_"+key] = p
		}
	}
	out, _ := json.Marshal(summary)
	fmt.Println(string(out))
	if summary["ok"] != true {
		os.Exit(1)
	}
}
