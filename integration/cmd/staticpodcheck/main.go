// Command staticpodcheck checks static pod manifests with the same functions
// the kubelet applies to each file in its --pod-manifest-path
// (k8s.io/kubernetes/pkg/kubelet/config/common.go, tryDecodeSinglePod):
// decode into the internal Pod type, the static-pod defaults (node name,
// name suffixed with it, namespace), the API server's create validation
// (validation.ValidatePodCreate), and podutil.HasAPIObjectReference, which
// refuses a static pod that references an API object (ServiceAccount,
// Secret, ConfigMap, PVC, ...): a static pod starts before the kubelet can
// reach the API. It also requires what getStaticPodPriorityWarning asks
// (priorityClassName system-node-critical with its priority), which the
// kubelet only logs.
//
// The kubelet's file source itself (pkg/kubelet/config.NewSourceFile) is not
// linked: it pulls modules integration/go.mod does not hold (k8s.io/cri-client).
//
//	staticpodcheck [--node NAME] MANIFEST...
//
// Prints one JSON line per manifest (file, pod name as the kubelet names it,
// hostNetwork, priorityClassName, images, hostPaths) and exits 0 when every
// manifest passes; otherwise prints why and exits 1.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"

	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/kubernetes/pkg/api/legacyscheme"
	podutil "k8s.io/kubernetes/pkg/api/pod"
	api "k8s.io/kubernetes/pkg/apis/core"
	_ "k8s.io/kubernetes/pkg/apis/core/install"
	"k8s.io/kubernetes/pkg/apis/core/validation"
)

// nodeCriticalPriority is the priority of system-node-critical
// (scheduling.SystemCriticalPriority + 1000), which the kubelet expects of a
// static pod.
const nodeCriticalPriority = 2000001000

type podSummary struct {
	File              string   `json:"file"`
	Name              string   `json:"name"`
	Namespace         string   `json:"namespace"`
	HostNetwork       bool     `json:"hostNetwork"`
	PriorityClassName string   `json:"priorityClassName,omitempty"`
	Images            []string `json:"images"`
	HostPaths         []string `json:"hostPaths"`
}

// check does what tryDecodeSinglePod does with one file, applyDefaults
// reduced to the fields validation looks at.
func check(file, node string) (*podSummary, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	js, err := utilyaml.ToJSON(data)
	if err != nil {
		return nil, fmt.Errorf("not YAML: %w", err)
	}
	obj, err := runtime.Decode(legacyscheme.Codecs.UniversalDecoder(), js)
	if err != nil {
		return nil, fmt.Errorf("couldn't parse as pod: %w", err)
	}
	pod, ok := obj.(*api.Pod)
	if !ok {
		return nil, fmt.Errorf("invalid pod: a %T", obj)
	}
	if pod.Name == "" {
		return nil, fmt.Errorf("invalid pod: name is needed for the pod")
	}
	pod.UID = "staticpodcheck"
	pod.Name = fmt.Sprintf("%s-%s", pod.Name, strings.ToLower(node))
	if pod.Namespace == "" {
		pod.Namespace = "default"
	}
	pod.Spec.NodeName = node
	opts := podutil.GetValidationOptionsFromPodSpecAndMeta(&pod.Spec, nil, &pod.ObjectMeta, nil)
	if errs := validation.ValidatePodCreate(pod, opts); len(errs) > 0 {
		return nil, fmt.Errorf("invalid pod: %v", errs)
	}
	if _, resource, err := podutil.HasAPIObjectReference(pod); err != nil {
		return nil, err
	} else if resource != "" {
		return nil, fmt.Errorf("static pods may not reference %s", resource)
	}
	// getStaticPodPriorityWarning: without both, mirror pod creation may fail.
	if pod.Spec.PriorityClassName != "system-node-critical" || pod.Spec.Priority == nil || *pod.Spec.Priority != nodeCriticalPriority {
		return nil, fmt.Errorf("static pod priority: want priorityClassName system-node-critical and priority %d (the kubelet warns that mirror pod creation may fail otherwise)", nodeCriticalPriority)
	}
	s := &podSummary{File: file, Name: pod.Name, Namespace: pod.Namespace,
		HostNetwork:       pod.Spec.HostNetwork,
		PriorityClassName: pod.Spec.PriorityClassName, Images: []string{}, HostPaths: []string{}}
	for _, c := range pod.Spec.Containers {
		s.Images = append(s.Images, c.Image)
	}
	for _, v := range pod.Spec.Volumes {
		if v.HostPath != nil {
			s.HostPaths = append(s.HostPaths, v.HostPath.Path)
		}
	}
	return s, nil
}

func main() {
	node := flag.String("node", "node-1", "the node name the kubelet runs as")
	flag.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: staticpodcheck [--node NAME] MANIFEST...")
		os.Exit(2)
	}
	bad := 0
	out := json.NewEncoder(os.Stdout)
	for _, f := range flag.Args() {
		s, err := check(f, *node)
		if err != nil {
			fmt.Fprintf(os.Stderr, "staticpodcheck: %s: %v\n", f, err)
			bad++
			continue
		}
		_ = out.Encode(s)
	}
	if bad > 0 {
		os.Exit(1)
	}
}
