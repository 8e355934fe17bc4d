#!/usr/bin/env bash
# The protobuf encoder against a real kube-apiserver (by hand; make
# protobuf-check covers the fuzz corpus): creates objects of many kinds in the
# test cluster (pods with volumes, probes, affinity and resources; a node; a
# service and an endpointslice; configmaps, secrets, a lease, a deployment, a
# job, a controllerrevision, RBAC, a priority class, a webhook configuration
# with caBundle "", a custom resource), then takes LIST and GET bodies, and
# ADDED watch events, from the API server in JSON and in protobuf
# (PartialObjectMetadata[List] for the custom resource and for built-ins too)
# into .run/protobuf-real/corpus.jsonl, and runs the corpus test on them:
# every JSON turned into protobuf by watchmux must be the API server's bytes.
#
# Needs the cluster: make cluster-up (with the same ETCD_PORT, ETCD_PEER_PORT
# and APISERVER_PORT as cluster-up.sh, when not the defaults). Leaves the
# namespace pbreal and the cluster-scoped objects in place.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
out="$root/.run/protobuf-real"
bash "$root/integration/scripts/cluster-up.sh" --check >/dev/null || { echo "protobuf-real: start the cluster first (make cluster-up)" >&2; exit 1; }
mkdir -p "$out"
kubectl=("$root/.run/kubectl" --kubeconfig "$root/.run/kubeconfig")
"${kubectl[@]}" apply -f - >/dev/null <<'YAML'
apiVersion: v1
kind: Namespace
metadata: {name: pbreal}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: cm1, namespace: pbreal, labels: {b: "2", a: "1"}, annotations: {note: "<x> & y"}}
data: {"k": "v&<", empty: ""}
binaryData: {bin: AAEC}
---
apiVersion: v1
kind: Secret
metadata: {name: s1, namespace: pbreal}
type: Opaque
data: {a: aGVsbG8=, e: ""}
immutable: false
---
apiVersion: v1
kind: Pod
metadata: {name: p1, namespace: pbreal, labels: {app: x}}
spec:
  priority: 0
  volumes:
  - {name: v, configMap: {name: cm1, defaultMode: 420}}
  - {name: e, emptyDir: {sizeLimit: 1Mi}}
  - {name: pr, projected: {sources: [{configMap: {name: cm1, items: [{key: k, path: k, mode: 256}]}}]}}
  affinity:
    nodeAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        nodeSelectorTerms: [{matchExpressions: [{key: k, operator: In, values: [a, b]}]}]
    podAntiAffinity:
      preferredDuringSchedulingIgnoredDuringExecution:
      - weight: 10
        podAffinityTerm: {topologyKey: kubernetes.io/hostname, labelSelector: {matchLabels: {app: x}}}
  containers:
  - name: c
    image: busybox
    command: [sh, -c, "sleep 1"]
    env: [{name: A, value: "1"}, {name: B, valueFrom: {fieldRef: {fieldPath: metadata.name}}}]
    ports: [{containerPort: 80, name: http}]
    resources: {limits: {cpu: 500m, memory: 1Gi}, requests: {cpu: "0.5", memory: 100Mi}}
    livenessProbe: {httpGet: {path: /, port: http}, periodSeconds: 10, initialDelaySeconds: 3}
    readinessProbe: {exec: {command: ["true"]}, failureThreshold: 5}
    startupProbe: {tcpSocket: {port: 80}}
    securityContext: {runAsUser: 1000, allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}
  tolerations: [{key: k, operator: Exists, effect: NoExecute, tolerationSeconds: 30}]
  securityContext: {supplementalGroups: [1, 2], fsGroup: 3}
---
apiVersion: v1
kind: Service
metadata: {name: svc1, namespace: pbreal}
spec:
  selector: {app: x}
  ports: [{name: http, port: 80, targetPort: http}, {name: "n", port: 81, targetPort: 8081}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: es1, namespace: pbreal, labels: {kubernetes.io/service-name: svc1}}
addressType: IPv4
endpoints:
- addresses: [10.0.0.1]
  conditions: {ready: true, serving: true, terminating: false}
  nodeName: n1
ports: [{name: http, port: 80, protocol: TCP}]
---
apiVersion: coordination.k8s.io/v1
kind: Lease
metadata: {name: l1, namespace: pbreal}
spec: {holderIdentity: h, leaseDurationSeconds: 40, acquireTime: "2024-05-06T07:08:09.123456Z", renewTime: "2024-05-06T07:08:19.654321Z"}
---
apiVersion: v1
kind: Node
metadata: {name: pbreal-node, labels: {kubernetes.io/hostname: pbreal-node}}
spec: {podCIDR: 10.1.0.0/24, podCIDRs: [10.1.0.0/24], taints: [{key: k, effect: NoSchedule}]}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: d1, namespace: pbreal}
spec:
  replicas: 2
  selector: {matchLabels: {app: d}}
  strategy: {rollingUpdate: {maxSurge: 25%, maxUnavailable: 0}}
  template:
    metadata: {labels: {app: d}}
    spec: {containers: [{name: c, image: nginx}]}
---
apiVersion: apps/v1
kind: ControllerRevision
metadata: {name: cr1, namespace: pbreal}
revision: 3
data: {spec: {template: {a: 1, b: "x"}}}
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: pbreal-high}
value: 1000
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: r1, namespace: pbreal}
rules: [{apiGroups: [""], resources: [pods], verbs: [get, list, watch]}]
---
apiVersion: batch/v1
kind: Job
metadata: {name: j1, namespace: pbreal}
spec:
  backoffLimit: 2
  template:
    spec: {restartPolicy: Never, containers: [{name: c, image: busybox}]}
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.com}
spec:
  group: example.com
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget}
  versions: [{name: v1, served: true, storage: true, schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}}]
YAML
# The custom resource needs its CRD established first.
"${kubectl[@]}" wait --for=condition=Established crd/widgets.example.com --timeout=30s >/dev/null
"${kubectl[@]}" apply -f - >/dev/null <<'YAML'
apiVersion: example.com/v1
kind: Widget
metadata: {name: w1, namespace: pbreal}
spec: {size: 3}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata: {name: pbreal-vwc}
webhooks:
- name: a.example.com
  admissionReviewVersions: [v1]
  sideEffects: None
  clientConfig: {service: {name: s, namespace: pbreal}, caBundle: ""}
  rules: [{apiGroups: [example.com], apiVersions: [v1], operations: [CREATE], resources: [widgets]}]
  failurePolicy: Ignore
YAML
python3 - "$root/.run/cluster/env" "$out/corpus.jsonl" <<'PY'
import base64, json, ssl, struct, sys, urllib.request
env = dict(l.strip().split('=', 1) for l in open(sys.argv[1]))
def unq(v): return v.strip("'\"")
api = unq(env['APISERVER_URL']); token = unq(env['ADMIN_TOKEN']); ca = unq(env['CA_CERT'])
ctx = ssl.create_default_context(cafile=ca)
PB = 'application/vnd.kubernetes.protobuf'
def get(path, accept):
    req = urllib.request.Request(api + path, headers={'Authorization': 'Bearer ' + token, 'Accept': accept})
    with urllib.request.urlopen(req, context=ctx) as r:
        return r.read(), r.headers.get('Content-Type')
out = open(sys.argv[2], "w")
n = 0
def record(api_version, kind, js, pb, watch=None):
    global n
    rec = {'apiVersion': api_version, 'kind': kind, 'n': n, 'json': js.decode(), 'protobuf': base64.b64encode(pb).decode()}
    if watch is not None: rec['watch'] = base64.b64encode(watch).decode()
    out.write(json.dumps(rec) + '\n'); n += 1
lists = ['/api/v1/namespaces/pbreal/configmaps', '/api/v1/namespaces/pbreal/secrets', '/api/v1/namespaces/pbreal/pods',
         '/api/v1/namespaces/pbreal/services', '/apis/discovery.k8s.io/v1/namespaces/pbreal/endpointslices',
         '/apis/coordination.k8s.io/v1/namespaces/pbreal/leases', '/api/v1/nodes', '/apis/apps/v1/namespaces/pbreal/deployments',
         '/apis/apps/v1/namespaces/pbreal/controllerrevisions', '/apis/scheduling.k8s.io/v1/priorityclasses',
         '/apis/rbac.authorization.k8s.io/v1/namespaces/pbreal/roles', '/apis/rbac.authorization.k8s.io/v1/clusterroles',
         '/apis/batch/v1/namespaces/pbreal/jobs', '/api/v1/namespaces', '/api/v1/namespaces/kube-system/configmaps',
         '/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations',
         '/apis/flowcontrol.apiserver.k8s.io/v1/flowschemas', '/apis/flowcontrol.apiserver.k8s.io/v1/prioritylevelconfigurations',
         '/api/v1/namespaces/default/services', '/api/v1/namespaces/default/endpoints', '/apis/storage.k8s.io/v1/storageclasses',
         '/api/v1/events']
for path in lists:
    js, _ = get(path, 'application/json'); pb, ct = get(path, PB)
    assert ct.startswith(PB), ct
    d = json.loads(js)
    record(d['apiVersion'], d['kind'], js, pb)
    # Each item as a single GET.
    for item in d['items']:
        m = item['metadata']
        one = path + '/' + m['name'] if 'namespaces/' in path or not m.get('namespace') else None
        if one is None: continue
        js1, _ = get(one, 'application/json'); pb1, _ = get(one, PB)
        d1 = json.loads(js1)
        record(d1['apiVersion'], d1['kind'], js1, pb1)
# PartialObjectMetadataList, custom resources included.
for path in ['/apis/example.com/v1/namespaces/pbreal/widgets', '/api/v1/namespaces/pbreal/configmaps', '/api/v1/namespaces/pbreal/pods']:
    suffix = ';as=PartialObjectMetadataList;g=meta.k8s.io;v=v1'
    js, _ = get(path, 'application/json' + suffix); pb, ct = get(path, PB + suffix)
    d = json.loads(js)
    record(d['apiVersion'], d['kind'], js, pb)
# Watch frames: JSON events and protobuf frames in the same order.
def watch(path, accept):
    req = urllib.request.Request(api + path, headers={'Authorization': 'Bearer ' + token, 'Accept': accept})
    with urllib.request.urlopen(req, context=ctx) as r:
        return r.read()
for path, accept_suffix in [('/api/v1/namespaces/pbreal/configmaps?watch=1&resourceVersion=0&timeoutSeconds=1', ''),
                            ('/api/v1/namespaces/pbreal/pods?watch=1&resourceVersion=0&timeoutSeconds=1', ''),
                            ('/api/v1/nodes?watch=1&resourceVersion=0&timeoutSeconds=1', ''),
                            ('/apis/example.com/v1/namespaces/pbreal/widgets?watch=1&resourceVersion=0&timeoutSeconds=1', ';as=PartialObjectMetadata;g=meta.k8s.io;v=v1'),
                            ('/api/v1/namespaces/pbreal/secrets?watch=1&resourceVersion=0&timeoutSeconds=1', ';as=PartialObjectMetadata;g=meta.k8s.io;v=v1')]:
    js = watch(path, 'application/json' + accept_suffix)
    pb = watch(path, PB + accept_suffix)
    lines = [l for l in js.decode().splitlines() if l]
    events = [json.loads(l) for l in lines]
    frames = []
    i = 0
    while i < len(pb):
        (ln,) = struct.unpack('>I', pb[i:i+4]); frames.append(pb[i:i+4+ln]); i += 4 + ln
    assert len(frames) == len(events), (path, len(frames), len(events))
    for ev, fr, line in zip(events, frames, lines):
        # The event's object bytes exactly as the JSON line has them
        # ({"type":"ADDED","object":{...}}).
        start = line.index('"object":') + len('"object":')
        raw = line[start:-1]
        # The frame's WatchEvent: 1: type, 2: RawExtension{1: raw}: find raw by parsing.
        body = fr[4:]
        def field(b, want):
            j = 0
            while j < len(b):
                key = b[j]; j += 1
                ln = 0; shift = 0
                while True:
                    c = b[j]; j += 1; ln |= (c & 0x7f) << shift; shift += 7
                    if c < 0x80: break
                if key >> 3 == want: return b[j:j+ln]
                j += ln
        envelope = field(field(body, 2), 1)
        assert ev['type'] == 'ADDED'
        o = ev['object']
        record(o['apiVersion'], o['kind'], raw.encode(), envelope, fr)
print('protobuf-real:', n, 'bodies and events from', api)
PY
cd "$root"
# The features every test step builds with (see the Makefile's test-unit): one dev build.
WATCHMUX_PROTOBUF_CORPUS="$out/corpus.jsonl" ${CARGO:-cargo} test --locked --features fault-injection --test protobuf_corpus every -- --nocapture
