// Command cpscenario runs the control-plane scenarios of issue 13 against a
// cluster started by integration/scripts/controlplane-up.sh: real
// kube-scheduler, kube-controller-manager and kubemark hollow nodes, with or
// without watchmux in between. It asserts outcomes, not mechanics, so the same
// run must pass in every topology:
//
//  1. the N hollow nodes are Ready and their leases are renewed;
//  2. a Deployment of 3 pods per node rolls out, every pod Running on a
//     hollow node, every node holding some;
//  3. a rolling update completes;
//  4. a Service's EndpointSlices list every pod as ready;
//  5. (-restart-cmd) watchmux restarted in the middle of a rollout, and the
//     rollout still completes;
//  6. (-stop-upstream-cmd) the tier of a tree stopped: every node's lease is
//     renewed twice through its node-local's fallback servers (the API
//     server) and every node stays Ready; the tier started again gets the
//     nodes' lease renewals back (-upstream-admin's /metrics);
//  7. (-stop-kubelet-cmd) a stopped hollow kubelet makes its node NotReady,
//     its pods are evicted (taint-based, tolerationSeconds 5) and replaced on
//     the other nodes; the kubelet started again makes the node Ready;
//  8. scale to zero: every pod is gone;
//  9. the namespace's deletion completes;
//  10. (-watchmux-admin) every watchmux served pod watches from its cache and
//     passed requests through (its /metrics).
//
// Each step waits for its condition with a bounded poll and fails with what
// it saw last. Prints one line per step with its duration.
//
// Usage: cpscenario -kubeconfig .run/kubeconfig -nodes 3 [-restart-cmd CMD]
//
//	[-stop-kubelet-cmd CMD -start-kubelet-cmd CMD -stop-node NAME]
//	[-watchmux-admin http://127.0.0.1:31011,...] [-only-rollout]
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

var (
	kubeconfig    = flag.String("kubeconfig", ".run/kubeconfig", "admin kubeconfig of the test cluster (direct to kube-apiserver)")
	nodes         = flag.Int("nodes", 3, "number of hollow nodes (hollow-node-0..N-1)")
	perNode       = flag.Int("pods-per-node", 3, "Deployment replicas per node")
	namespace     = flag.String("namespace", "cp-e2e", "namespace the scenarios create and delete")
	restartCmd    = flag.String("restart-cmd", "", "shell command that restarts watchmux; run in the middle of a rollout")
	stopKubelet   = flag.String("stop-kubelet-cmd", "", "shell command that stops the kubelet of -stop-node")
	startKubelet  = flag.String("start-kubelet-cmd", "", "shell command that starts it again")
	stopNode      = flag.String("stop-node", "", "node whose kubelet -stop-kubelet-cmd stops")
	stopUpstream  = flag.String("stop-upstream-cmd", "", "shell command that stops the tier of a tree (its node-locals fall back to the API server)")
	startUpstream = flag.String("start-upstream-cmd", "", "shell command that starts it again")
	upstreamAdmin = flag.String("upstream-admin", "", "admin URL of the tier -stop-upstream-cmd stops, whose /metrics must show the nodes' lease renewals once it is back")
	admins        = flag.String("watchmux-admin", "", "comma-separated watchmux admin URLs whose /metrics must show traffic")
	resumedAdmin  = flag.String("resumed-admin", "", "admin URL of the node-local watchmux -restart-cmd restarts: its kubelet's pod watch must have resumed there without a LIST")
	onlyRollout   = flag.Bool("only-rollout", false, "benchmark mode: nodes Ready, one rollout to Running, then delete the namespace")
	timeout       = flag.Duration("step-timeout", 120*time.Second, "bound of each wait")
)

var cs *kubernetes.Clientset

func main() {
	flag.Parse()
	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	check(err, "kubeconfig")
	cfg.QPS, cfg.Burst = 50, 100
	cs, err = kubernetes.NewForConfig(cfg)
	check(err, "client")
	ctx := context.Background()
	replicas := int32(*nodes * *perNode)
	total := time.Now()

	step("nodes Ready, leases renewed", func() { nodesReadyAndRenewing(ctx) })
	step("namespace created", func() {
		_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: *namespace}}, metav1.CreateOptions{})
		check(err, "create namespace")
	})
	step(fmt.Sprintf("Deployment of %d pods Running on every node", replicas), func() {
		_, err := cs.AppsV1().Deployments(*namespace).Create(ctx, deployment(replicas), metav1.CreateOptions{})
		check(err, "create deployment")
		waitRollout(ctx, replicas)
		waitPodsRunning(ctx, replicas, true)
	})
	if !*onlyRollout {
		step("rolling update completes", func() {
			bump(ctx, "1")
			waitRollout(ctx, replicas)
			waitPodsRunning(ctx, replicas, false)
		})
		step("Service EndpointSlices list every pod", func() {
			_, err := cs.CoreV1().Services(*namespace).Create(ctx, &corev1.Service{
				ObjectMeta: metav1.ObjectMeta{Name: "web"},
				Spec: corev1.ServiceSpec{
					Selector: map[string]string{"app": "web"},
					Ports:    []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}},
				},
			}, metav1.CreateOptions{})
			check(err, "create service")
			waitEndpoints(ctx, int(replicas))
		})
		if *restartCmd != "" {
			step("watchmux restarted mid-rollout, rollout completes", func() {
				bump(ctx, "2")
				waitFor("the rollout to start", func() (bool, string) {
					d := getDeployment(ctx)
					return d.Status.UpdatedReplicas > 0 && d.Status.UpdatedReplicas < replicas,
						fmt.Sprintf("updated %d of %d", d.Status.UpdatedReplicas, replicas)
				})
				run(*restartCmd)
				waitRollout(ctx, replicas)
				waitPodsRunning(ctx, replicas, false)
			})
		}
		if *stopUpstream != "" && *startUpstream != "" {
			step("tier stopped: leases renewed through the fallback, nodes Ready", func() { tierStopped(ctx) })
		}
		if *stopKubelet != "" && *stopNode != "" {
			step("stopped kubelet: node NotReady, pods evicted and replaced", func() {
				onNode := podsOn(ctx, *stopNode)
				if len(onNode) == 0 {
					fail("no pod on %s before its kubelet stops", *stopNode)
				}
				run(*stopKubelet)
				waitFor(*stopNode+" NotReady", func() (bool, string) {
					n, err := cs.CoreV1().Nodes().Get(ctx, *stopNode, metav1.GetOptions{})
					if err != nil {
						return false, err.Error()
					}
					s := readyStatus(n)
					return s != corev1.ConditionTrue, "Ready=" + string(s)
				})
				waitFor("its pods evicted", func() (bool, string) {
					left := 0
					for _, p := range listPods(ctx) {
						if p.Spec.NodeName == *stopNode && p.DeletionTimestamp == nil {
							left++
						}
					}
					return left == 0, fmt.Sprintf("%d pods on %s not being deleted", left, *stopNode)
				})
				waitFor("replacements Running elsewhere", func() (bool, string) {
					running := 0
					for _, p := range listPods(ctx) {
						if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning && p.Spec.NodeName != *stopNode {
							running++
						}
					}
					return running == int(replicas), fmt.Sprintf("%d of %d Running off %s", running, replicas, *stopNode)
				})
				if *startKubelet != "" {
					run(*startKubelet)
					waitFor(*stopNode+" Ready again, its evicted pods gone", func() (bool, string) {
						n, err := cs.CoreV1().Nodes().Get(ctx, *stopNode, metav1.GetOptions{})
						if err != nil {
							return false, err.Error()
						}
						left := len(podsOn(ctx, *stopNode))
						return readyStatus(n) == corev1.ConditionTrue && left == 0,
							fmt.Sprintf("Ready=%s, %d pods left on it", readyStatus(n), left)
					})
				}
			})
		}
		step("scale to zero: every pod gone", func() {
			_, err := cs.AppsV1().Deployments(*namespace).Patch(ctx, "web", types.MergePatchType,
				[]byte(`{"spec":{"replicas":0}}`), metav1.PatchOptions{})
			check(err, "scale")
			waitFor("no pods", func() (bool, string) {
				n := len(listPods(ctx))
				return n == 0, fmt.Sprintf("%d pods left", n)
			})
		})
	}
	step("namespace deletion completes", func() {
		check(cs.CoreV1().Namespaces().Delete(ctx, *namespace, metav1.DeleteOptions{}), "delete namespace")
		waitFor("namespace gone", func() (bool, string) {
			ns, err := cs.CoreV1().Namespaces().Get(ctx, *namespace, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return true, ""
			}
			if err != nil {
				return false, err.Error()
			}
			return false, fmt.Sprintf("phase %s, conditions %v", ns.Status.Phase, ns.Status.Conditions)
		})
	})
	step("nodes still Ready", func() {
		ok, why := allReady(ctx)
		if !ok {
			fail("%s", why)
		}
	})
	if *admins != "" {
		step("traffic went through watchmux", func() {
			for _, a := range strings.Split(*admins, ",") {
				// Every client of a watchmux watches pods (kubelets: their
				// node's; the scheduler and controllers: all), served from the
				// cache; writes (status, leases) pass through. Lists may be
				// none: client-go's informers list by streaming watch.
				// Awaited, not sampled: a watchmux restarted mid-rollout sees
				// its kubelet's pod watch again only after the reflector's
				// backoff (client-go: 0.8 s doubling to 30 s, jittered up to
				// twice that, reset only after 2 minutes without a failure),
				// which the restart's refused connections grew.
				var m map[string]float64
				waitFor(a+" serving pod watches from its cache and passing writes through", func() (bool, string) {
					m = metrics(a)
					for _, name := range []string{`watchmux_cache_watch_total{resource="pods"}`, "watchmux_passthrough_requests_total"} {
						if m[name] <= 0 {
							return false, fmt.Sprintf("%s is %v; %s", name, m[name],
								strings.Join(metricLines(a, "passthrough_requests_total{verb=\"watch\"", "backfill", `watch_total{resource="pods"}`), "; "))
						}
					}
					return true, ""
				})
				fmt.Printf("    %s: cache watches %.0f, gets %.0f, lists %.0f; passed through %.0f\n", a,
					m["watchmux_cache_watch_total"], m["watchmux_cache_get_total"], m["watchmux_cache_list_total"],
					m["watchmux_passthrough_requests_total"])
			}
		})
	}
	if *resumedAdmin != "" {
		step("the kubelet resumed its pod watch across the restart, no LIST", func() { resumedWithoutList(*resumedAdmin) })
	}
	fmt.Printf("cpscenario: all steps passed in %s\n", time.Since(total).Round(time.Millisecond))
}

func step(name string, f func()) {
	start := time.Now()
	f()
	fmt.Printf("ok   %-60s %6.1fs\n", name, time.Since(start).Seconds())
}

func fail(format string, args ...any) {
	fmt.Printf("FAIL "+format+"\n", args...)
	os.Exit(1)
}

func check(err error, what string) {
	if err != nil {
		fail("%s: %v", what, err)
	}
}

// waitFor polls cond every 250ms until it holds, failing after -step-timeout
// with the last description cond gave.
func waitFor(what string, cond func() (bool, string)) {
	deadline := time.Now().Add(*timeout)
	last := ""
	for {
		ok, why := cond()
		if ok {
			return
		}
		last = why
		if time.Now().After(deadline) {
			fail("waiting for %s: not within %s; last: %s", what, *timeout, last)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func run(cmd string) {
	out, err := exec.Command("bash", "-c", cmd).CombinedOutput()
	if err != nil {
		fail("%q: %v\n%s", cmd, err, out)
	}
}

func nodeNames() []string {
	names := make([]string, *nodes)
	for i := range names {
		names[i] = fmt.Sprintf("hollow-node-%d", i)
	}
	return names
}

func readyStatus(n *corev1.Node) corev1.ConditionStatus {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status
		}
	}
	return "missing"
}

func allReady(ctx context.Context) (bool, string) {
	for _, name := range nodeNames() {
		n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, name + ": " + err.Error()
		}
		if s := readyStatus(n); s != corev1.ConditionTrue {
			return false, fmt.Sprintf("%s Ready=%s", name, s)
		}
	}
	return true, ""
}

// nodesReadyAndRenewing: every hollow node Ready, and every node's lease
// renewed after it was first seen (the kubelet heartbeats every 10s).
func nodesReadyAndRenewing(ctx context.Context) {
	waitFor("nodes Ready", func() (bool, string) { return allReady(ctx) })
	first := map[string]time.Time{}
	waitFor("leases renewed", func() (bool, string) {
		waiting := []string{}
		for _, name := range nodeNames() {
			l, err := cs.CoordinationV1().Leases("kube-node-lease").Get(ctx, name, metav1.GetOptions{})
			if err != nil || l.Spec.RenewTime == nil {
				waiting = append(waiting, name)
				continue
			}
			t := l.Spec.RenewTime.Time
			if f, seen := first[name]; !seen {
				first[name] = t
				waiting = append(waiting, name)
			} else if !t.After(f) {
				waiting = append(waiting, name)
			}
		}
		return len(waiting) == 0, "not renewed yet: " + strings.Join(waiting, ",")
	})
}

// tierStopped stops the tier of a tree: each node-local's fallback server
// (the API server) must carry its kubelet's lease renewals, two per node,
// while every node stays Ready; then the tier starts again and must get the
// renewals back (node-locals return to their primary upstream).
func tierStopped(ctx context.Context) {
	run(*stopUpstream)
	stopped := time.Now()
	renewals := map[string]int{}
	last := map[string]time.Time{}
	waitFor("two lease renewals per node with the tier stopped", func() (bool, string) {
		if ok, why := allReady(ctx); !ok {
			fail("a node is not Ready with the tier stopped: %s", why)
		}
		waiting := []string{}
		for _, name := range nodeNames() {
			l, err := cs.CoordinationV1().Leases("kube-node-lease").Get(ctx, name, metav1.GetOptions{})
			if err == nil && l.Spec.RenewTime != nil {
				if t := l.Spec.RenewTime.Time; t.After(stopped) && t.After(last[name]) {
					renewals[name]++
					last[name] = t
				}
			}
			if renewals[name] < 2 {
				waiting = append(waiting, fmt.Sprintf("%s: %d", name, renewals[name]))
			}
		}
		return len(waiting) == 0, "renewals since the stop: " + strings.Join(waiting, ", ")
	})
	run(*startUpstream)
	if *upstreamAdmin == "" {
		return
	}
	name := `watchmux_passthrough_requests_total{resource="leases.coordination.k8s.io"}`
	waitFor("the tier to get the nodes' lease renewals back", func() (bool, string) {
		resp, err := http.Get(strings.TrimSuffix(*upstreamAdmin, "/") + "/readyz")
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		got := metrics(*upstreamAdmin)[name]
		return got >= float64(*nodes), fmt.Sprintf("%s is %v", name, got)
	})
}

func deployment(replicas int32) *appsv1.Deployment {
	five := int64(5)
	labels := map[string]string{"app": "web"}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Strategy: appsv1.DeploymentStrategy{
				Type: appsv1.RollingUpdateDeploymentStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDeployment{
					MaxUnavailable: ptr(intstr.FromString("25%")),
					MaxSurge:       ptr(intstr.FromString("25%")),
				},
			},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					Containers: []corev1.Container{{
						Name:  "pause",
						Image: "registry.k8s.io/pause:3.10",
						Ports: []corev1.ContainerPort{{ContainerPort: 8080}},
						Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
							corev1.ResourceCPU:    resource.MustParse("10m"),
							corev1.ResourceMemory: resource.MustParse("16Mi"),
						}},
					}},
					TerminationGracePeriodSeconds: ptr(int64(1)),
					// A stopped kubelet's pods are evicted 5s after its node
					// is tainted unreachable/not-ready (the default is 300s).
					Tolerations: []corev1.Toleration{
						{Key: "node.kubernetes.io/unreachable", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: &five},
						{Key: "node.kubernetes.io/not-ready", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: &five},
					},
				},
			},
		},
	}
}

func ptr[T any](v T) *T { return &v }

func getDeployment(ctx context.Context) *appsv1.Deployment {
	d, err := cs.AppsV1().Deployments(*namespace).Get(ctx, "web", metav1.GetOptions{})
	check(err, "get deployment")
	return d
}

// bump changes the pod template, which starts a rolling update.
func bump(ctx context.Context, v string) {
	patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{"cpscenario/revision":%q}}}}}`, v)
	_, err := cs.AppsV1().Deployments(*namespace).Patch(ctx, "web", types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{})
	check(err, "patch deployment")
}

// waitRollout: the deployment controller saw the latest spec and every
// replica is updated and available, none of an older template left.
func waitRollout(ctx context.Context, replicas int32) {
	waitFor("rollout complete", func() (bool, string) {
		d := getDeployment(ctx)
		s := d.Status
		return s.ObservedGeneration >= d.Generation && s.UpdatedReplicas == replicas &&
				s.Replicas == replicas && s.AvailableReplicas == replicas && s.UnavailableReplicas == 0,
			fmt.Sprintf("generation %d observed %d, replicas %d updated %d available %d",
				d.Generation, s.ObservedGeneration, s.Replicas, s.UpdatedReplicas, s.AvailableReplicas)
	})
}

func listPods(ctx context.Context) []corev1.Pod {
	l, err := cs.CoreV1().Pods(*namespace).List(ctx, metav1.ListOptions{})
	check(err, "list pods")
	return l.Items
}

func podsOn(ctx context.Context, node string) []corev1.Pod {
	var out []corev1.Pod
	for _, p := range listPods(ctx) {
		if p.Spec.NodeName == node {
			out = append(out, p)
		}
	}
	return out
}

// waitPodsRunning: exactly `replicas` pods not being deleted, all Running and
// Ready on hollow nodes; with spread, every node runs at least one.
func waitPodsRunning(ctx context.Context, replicas int32, spread bool) {
	waitFor("pods Running", func() (bool, string) {
		running, perNode := 0, map[string]int{}
		live := 0
		for _, p := range listPods(ctx) {
			if p.DeletionTimestamp != nil {
				continue
			}
			live++
			if p.Status.Phase == corev1.PodRunning && podReady(&p) && strings.HasPrefix(p.Spec.NodeName, "hollow-node-") {
				running++
				perNode[p.Spec.NodeName]++
			}
		}
		ok := running == int(replicas) && live == int(replicas)
		if ok && spread {
			for _, n := range nodeNames() {
				if perNode[n] == 0 {
					ok = false
				}
			}
		}
		keys := make([]string, 0, len(perNode))
		for k := range perNode {
			keys = append(keys, fmt.Sprintf("%s=%d", k, perNode[k]))
		}
		sort.Strings(keys)
		return ok, fmt.Sprintf("%d live, %d Running+Ready (%s)", live, running, strings.Join(keys, " "))
	})
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// waitEndpoints: the Service's EndpointSlices list exactly the live pods'
// addresses as ready.
func waitEndpoints(ctx context.Context, want int) {
	waitFor("EndpointSlices", func() (bool, string) {
		l, err := cs.DiscoveryV1().EndpointSlices(*namespace).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=web"})
		if err != nil {
			return false, err.Error()
		}
		ready := 0
		for _, s := range l.Items {
			for _, e := range s.Endpoints {
				if e.Conditions.Ready != nil && *e.Conditions.Ready && e.TargetRef != nil {
					ready++
				}
			}
		}
		return ready == want, fmt.Sprintf("%d slices, %d ready endpoints of %d", len(l.Items), ready, want)
	})
}

// metrics sums every sample of each metric family at <admin>/metrics, by
// name and by name{resource="..."}.
// resumedWithoutList checks, on a node-local watchmux restarted under its
// kubelet, that the kubelet's pod watch came back from the version it had
// (through the new process's backfill, served from it or, past its bounds,
// passed through: either way a resume) and that no pod LIST reached it: a
// relist would be a LIST, or a watch-list, which no backfill serves.
func resumedWithoutList(admin string) {
	var resumed, lists float64
	waitFor("the kubelet's pod watch resumed at "+admin, func() (bool, string) {
		resumed, lists = 0, 0
		for _, line := range metricLines(admin, `watchmux_watch_backfill_watchers_total{resource="pods"`,
			`watchmux_cache_list_total{resource="pods"}`, `watchmux_passthrough_requests_total{verb="list",resource="pods"`) {
			f := strings.Fields(line)
			v, _ := strconv.ParseFloat(f[len(f)-1], 64)
			switch {
			case strings.Contains(line, `result="served"`) || strings.Contains(line, `result="passthrough"`):
				resumed += v
			case strings.Contains(line, "list"):
				lists += v
			}
		}
		return resumed > 0, "no pod watch resumed through the backfill yet"
	})
	if lists > 0 {
		fail("%s: %v pod LISTs after the restart: the kubelet listed again", admin, lists)
	}
	fmt.Printf("    %s: pod watches resumed %.0f, pod LISTs 0\n", admin, resumed)
}

// metricLines returns the sample lines of admin's /metrics that contain any
// of the substrings.
func metricLines(admin string, substrings ...string) []string {
	resp, err := http.Get(strings.TrimSuffix(admin, "/") + "/metrics")
	check(err, "metrics")
	defer resp.Body.Close()
	var out []string
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		for _, s := range substrings {
			if !strings.HasPrefix(line, "#") && strings.Contains(line, s) {
				out = append(out, line)
				break
			}
		}
	}
	return out
}

func metrics(admin string) map[string]float64 {
	resp, err := http.Get(strings.TrimSuffix(admin, "/") + "/metrics")
	check(err, "metrics")
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") || line == "" {
			continue
		}
		name := line
		if i := strings.IndexAny(line, "{ "); i >= 0 {
			name = line[:i]
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			continue
		}
		out[name] += v
		if i := strings.Index(line, `resource="`); i >= 0 {
			r := line[i+len(`resource="`):]
			out[name+`{resource="`+r[:strings.IndexByte(r, '"')]+`"}`] += v
		}
	}
	return out
}
