//! The objects of the simulated cluster, shaped as a real cluster's are: Nodes
//! with a kubelet's status (capacity, conditions, images), Pods bound to them
//! with two containers, environment, probes, volumes and a running status,
//! Services with EndpointSlices of their pods, and ConfigMaps and Secrets per
//! namespace that the pods mount. Everything is a function of its index, so
//! a run can be repeated and a kubelet knows its objects without listing.
//!
//! A pod is about 4 KiB of JSON once kube-apiserver has added its
//! managedFields (two managers: the creator and the status writer), a node
//! about 5 KiB, as the issue asks; `main` reports the measured sizes.

use serde_json::{Value, json};

/// The shape of the simulated cluster.
#[derive(Clone, Copy, Debug)]
pub struct World {
    pub nodes: usize,
    pub pods_per_node: usize,
    pub services: usize,
    pub namespaces: usize,
    /// ConfigMaps and Secrets in each namespace.
    pub per_namespace: usize,
}

const CREATED: &str = "2026-12-01T08:00:00Z";

impl World {
    pub fn pods(&self) -> usize {
        self.nodes * self.pods_per_node
    }

    pub fn node_name(i: usize) -> String {
        format!("node-{i:05}")
    }

    pub fn namespace(&self, i: usize) -> String {
        format!("scale-{:03}", i % self.namespaces)
    }

    /// Pod `p` runs on node `p % nodes` (so each node's pods spread over
    /// namespaces and services, as a scheduler spreads replicas), in
    /// namespace `p % namespaces`, behind service `p % services`.
    pub fn pod_node(&self, p: usize) -> usize {
        p % self.nodes
    }

    pub fn pod_name(p: usize) -> String {
        format!("pod-{p:06}")
    }

    fn service_of(&self, p: usize) -> usize {
        p % self.services
    }

    /// A service's namespace: that of its pods (p % services == s, so p % namespaces
    /// is fixed when namespaces divides services; otherwise the first pod's).
    pub fn service_namespace(&self, s: usize) -> String {
        self.namespace(s)
    }

    /// The pods behind service `s`, in its namespace.
    pub fn service_pods(&self, s: usize) -> impl Iterator<Item = usize> + '_ {
        let ns = self.namespace(s);
        (s..self.pods()).step_by(self.services).filter(move |&p| self.namespace(p) == ns)
    }

    /// The ConfigMap and Secret pod `p` mounts (in its namespace).
    pub fn pod_config(&self, p: usize) -> (String, String) {
        let k = (p / self.namespaces) % self.per_namespace;
        (format!("config-{k:02}"), format!("secret-{k:02}"))
    }

    pub fn pod_ip(p: usize) -> String {
        format!("10.{}.{}.{}", 64 + (p >> 16) % 64, (p >> 8) & 255, p & 255)
    }

    pub fn node(&self, i: usize) -> Value {
        let name = Self::node_name(i);
        json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {
                "kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
                "node.kubernetes.io/instance-type": "m6i.2xlarge",
                "topology.kubernetes.io/region": "region-1",
                "topology.kubernetes.io/zone": format!("region-1{}", ["a", "b", "c"][i % 3]),
                "node-role.kubernetes.io/worker": ""},
                "annotations": {"node.alpha.kubernetes.io/ttl": "0",
                    "volumes.kubernetes.io/controller-managed-attach-detach": "true"}},
            "spec": {"podCIDR": format!("10.{}.{}.0/24", 128 + i / 256, i % 256),
                "podCIDRs": [format!("10.{}.{}.0/24", 128 + i / 256, i % 256)],
                "providerID": format!("simulated://region-1/{name}")}
        })
    }

    /// What a kubelet reports: written with the status subresource.
    pub fn node_status(&self, i: usize) -> Value {
        let name = Self::node_name(i);
        let cond = |t: &str, s: &str, reason: &str, msg: &str| {
            json!({"type": t, "status": s,
            "lastHeartbeatTime": CREATED, "lastTransitionTime": CREATED, "reason": reason, "message": msg})
        };
        let images: Vec<Value> = (0..12)
            .map(|k| {
                json!({"names": [format!("images.example/team-{k}/service@sha256:{:064x}", k * 7919 + 1),
                format!("images.example/team-{k}/service:v1.{k}.0")], "sizeBytes": 50_000_000 + k * 1_234_567})
            })
            .collect();
        json!({"status": {
            "capacity": {"cpu": "8", "ephemeral-storage": "104845292Ki", "hugepages-1Gi": "0", "hugepages-2Mi": "0",
                "memory": "32386524Ki", "pods": "110"},
            "allocatable": {"cpu": "7910m", "ephemeral-storage": "96625420948", "hugepages-1Gi": "0", "hugepages-2Mi": "0",
                "memory": "31235548Ki", "pods": "110"},
            "conditions": [
                cond("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
                cond("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                cond("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
                cond("Ready", "True", "KubeletReady", "kubelet is posting ready status")],
            "addresses": [{"type": "InternalIP", "address": format!("192.168.{}.{}", i / 256, i % 256)},
                {"type": "Hostname", "address": name}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {"machineID": format!("{:032x}", i * 104729 + 17), "systemUUID": format!("ec2{:029x}", i),
                "bootID": format!("{:08x}-0000-4000-8000-{:012x}", i, i * 31), "kernelVersion": "6.1.0-27-cloud-amd64",
                "osImage": "Debian GNU/Linux 12 (bookworm)", "containerRuntimeVersion": "containerd://2.1.4",
                "kubeletVersion": "v1.37.2", "kubeProxyVersion": "", "operatingSystem": "linux", "architecture": "amd64"},
            "images": images}})
    }

    pub fn pod(&self, p: usize) -> Value {
        let ns = self.namespace(p);
        let s = self.service_of(p);
        let (cm, secret) = self.pod_config(p);
        let env: Vec<Value> = (0..8)
            .map(|k| json!({"name": format!("SETTING_{k}"), "value": format!("value-{k}-for-service-{s}")}))
            .chain([
                json!({"name": "POD_IP", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "status.podIP"}}}),
                json!({"name": "NODE_NAME", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "spec.nodeName"}}}),
            ])
            .collect();
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": Self::pod_name(p), "namespace": ns,
                "labels": {"app": format!("service-{s:04}"), "pod-template-hash": "6d9f8b7c5d", "tier": "backend"},
                "annotations": {"kubectl.kubernetes.io/restartedAt": CREATED},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                    "name": format!("service-{s:04}-6d9f8b7c5d"),
                    "uid": format!("{:08x}-1111-4222-8333-{:012x}", s, s * 7), "controller": true,
                    "blockOwnerDeletion": true}]},
            "spec": {
                "nodeName": Self::node_name(self.pod_node(p)),
                "containers": [
                    {"name": "app", "image": format!("images.example/team-{}/service:v1.{}.0", s % 12, s % 12),
                     "args": ["--listen=:8080", "--config=/etc/app/config.yaml"],
                     "env": env,
                     "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}],
                     "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "256Mi"}},
                     "volumeMounts": [{"name": "config", "mountPath": "/etc/app"},
                        {"name": "secret", "mountPath": "/etc/secret", "readOnly": true}],
                     "readinessProbe": {"httpGet": {"path": "/healthz", "port": 8080, "scheme": "HTTP"},
                        "periodSeconds": 10, "timeoutSeconds": 1, "successThreshold": 1, "failureThreshold": 3},
                     "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
                     "imagePullPolicy": "IfNotPresent"},
                    {"name": "proxy", "image": "images.example/mesh/proxy:v1.24.3",
                     "args": ["proxy", "sidecar", "--concurrency=2"],
                     "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}},
                     "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
                     "imagePullPolicy": "IfNotPresent"}],
                "volumes": [{"name": "config", "configMap": {"name": cm, "defaultMode": 420}},
                    {"name": "secret", "secret": {"secretName": secret, "defaultMode": 420}}],
                "restartPolicy": "Always", "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst",
                "schedulerName": "default-scheduler", "priority": 0, "enableServiceLinks": false,
                "tolerations": [
                    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
                    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}]}
        })
    }

    /// A running pod's status, as its kubelet writes it (status subresource).
    pub fn pod_status(&self, p: usize) -> Value {
        let node = self.pod_node(p);
        let ip = Self::pod_ip(p);
        let cond = |t: &str| json!({"type": t, "status": "True", "lastProbeTime": null, "lastTransitionTime": CREATED});
        let running = |name: &str, image: String| {
            json!({"name": name, "ready": true, "restartCount": 0,
            "started": true, "state": {"running": {"startedAt": CREATED}}, "lastState": {},
            "image": image.clone(), "imageID": format!("{}@sha256:{:064x}", image, p * 31 + 7),
            "containerID": format!("containerd://{:064x}", p * 131 + name.len())})
        };
        let s = self.service_of(p);
        json!({"status": {
            "phase": "Running",
            "conditions": [cond("PodReadyToStartContainers"), cond("Initialized"), cond("Ready"),
                cond("ContainersReady"), cond("PodScheduled")],
            "hostIP": format!("192.168.{}.{}", node / 256, node % 256),
            "hostIPs": [{"ip": format!("192.168.{}.{}", node / 256, node % 256)}],
            "podIP": ip, "podIPs": [{"ip": ip}], "startTime": CREATED, "qosClass": "Burstable",
            "containerStatuses": [
                running("app", format!("images.example/team-{}/service:v1.{}.0", s % 12, s % 12)),
                running("proxy", "images.example/mesh/proxy:v1.24.3".to_owned())]}})
    }

    pub fn service(&self, s: usize) -> Value {
        json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": format!("service-{s:04}"), "namespace": self.service_namespace(s),
                "labels": {"app": format!("service-{s:04}")}},
            "spec": {"selector": {"app": format!("service-{s:04}")},
                "ports": [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}],
                // Headless: the test cluster's service range is small, and the
                // objects' shape (selector, ports) is what the watchers carry.
                "clusterIP": "None"}})
    }

    /// The EndpointSlices of service `s`: its pods, at most 100 a slice as
    /// the EndpointSlice controller cuts them.
    pub fn endpoint_slices(&self, s: usize) -> Vec<Value> {
        let pods: Vec<usize> = self.service_pods(s).collect();
        pods.chunks(100)
            .enumerate()
            .map(|(k, chunk)| {
                let endpoints: Vec<Value> = chunk
                    .iter()
                    .map(|&p| {
                        json!({"addresses": [Self::pod_ip(p)],
                        "conditions": {"ready": true, "serving": true, "terminating": false},
                        "nodeName": Self::node_name(self.pod_node(p)),
                        "targetRef": {"kind": "Pod", "namespace": self.namespace(p), "name": Self::pod_name(p)},
                        "zone": format!("region-1{}", ["a", "b", "c"][self.pod_node(p) % 3])})
                    })
                    .collect();
                json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                    "metadata": {"name": format!("service-{s:04}-{k}"), "namespace": self.service_namespace(s),
                        "labels": {"kubernetes.io/service-name": format!("service-{s:04}"),
                            "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io"}},
                    "addressType": "IPv4",
                    "endpoints": endpoints,
                    "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}]})
            })
            .collect()
    }

    pub fn config_map(&self, ns: usize, k: usize) -> Value {
        let data: serde_json::Map<String, Value> = (0..6)
            .map(|j| (format!("setting-{j}.yaml"), json!(format!("key: value-{ns}-{k}-{j}\nlimit: {}\n", j * 100))))
            .collect();
        json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": format!("config-{k:02}"), "namespace": self.namespace(ns)}, "data": data})
    }

    pub fn secret(&self, ns: usize, k: usize) -> Value {
        json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": format!("secret-{k:02}"), "namespace": self.namespace(ns)},
            "data": {"token": "c2NhbGUtYmVuY2gtdG9rZW4tMDEyMzQ1Njc4OWFiY2RlZg==",
                "ca.crt": "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUJrVENCKzZnQXdJQkFnSUJBVEFLQmdncWhrak9QUVFEQWpBPQo="}})
    }
}
