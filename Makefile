# watchmux: build, demo and test entry points. See README.md.
#
#   make demo    a real kube-apiserver on loopback, watchmux in front, a live watch fan-out
#   make test    every test: unit and in-process, then end-to-end against the real API server

SHELL := /bin/bash
CARGO ?= cargo

.PHONY: all build release k8s cluster-up cluster-down demo test test-unit test-e2e \
	bench bench-passthrough bench-fanout bench-kubelet bench-fairness bench-restart bench-plots bench-auth \
	chaos chaos-quick chaos-persist chaos-reboot test-chaos-quick audit fmt clean monitoring-check fuzz-auth
.PHONY: protobuf-check
.PHONY: bench-protobuf bench-compress bench-table
.PHONY: controlplane-test test-controlplane bench-controlplane

all: build

# The source revision watchmux_build_info reports (build.rs reads it; a build
# outside git, or with plain cargo, says "unknown").
build release: export WATCHMUX_GIT_REVISION ?= $(shell git rev-parse --short=12 HEAD 2>/dev/null)

build:
	$(CARGO) build --locked

release:
	$(CARGO) build --locked --release

## The OCI image, built from the Dockerfile without a container daemon:
## .run/image/watchmux-oci.tar (and the layout .run/image/oci); docs/image.md.
.PHONY: image image-test
image:
	bash integration/scripts/image.sh

## A release for the version in Cargo.toml (Chart.yaml must agree): the amd64
## and arm64 images and their index, SBOMs, a cosign signature verified on a
## registry on loopback, the packaged chart pushed there and pulled back, and
## SHA256SUMS, in .run/dist/<version>/ (docs/release.md). Not part of make test.
.PHONY: dist
dist:
	bash integration/scripts/dist.sh

## The image run with runc against the test API server (Linux, root; installs
## runc if missing). Also part of make test, after the end-to-end suite.
image-test:
	bash integration/scripts/image-test.sh

## The real kube-apiserver, kubectl and etcd, built from the Go modules in
## integration/go.mod (cached: rebuilt only when their inputs change).
k8s:
	bash integration/scripts/build-k8s.sh

cluster-up:
	bash integration/scripts/cluster-up.sh

cluster-down:
	bash integration/scripts/cluster-down.sh

demo: release
	bash integration/scripts/demo.sh

test: test-unit test-e2e test-controlplane test-chaos-quick

## Formatting, lints (Rust, Dockerfile), the module graph (no cycles) and
## docs/architecture.md's module table (against lib.rs), unit
## tests and the in-process proxy tests, the protobuf table and the Table
## columns against the pinned Go modules.
## Every test step (here, e2e.sh, fuzz-auth.sh, protobuf-check.sh, the
## control-plane scripts, test-chaos-quick) builds with the `fault-injection`
## feature: the end-to-end and chaos cases need the hook, which stays unarmed
## without its variable, and one set of features means the crate is compiled
## once in the dev profile for all of them (the release build never has it:
## release-has-no-faults.sh).
test-unit:
	$(CARGO) fmt --check
	python3 integration/scripts/module_graph_test.py
	python3 integration/scripts/module-graph.py
	python3 integration/scripts/module-table.py
	bash integration/scripts/dockerfile-lint.sh
	$(CARGO) clippy --locked --all-targets -- -D warnings
	$(CARGO) clippy --locked --features fault-injection --test e2e --test fuzz_auth -- -D warnings
	$(CARGO) test --locked --features fault-injection
	$(MAKE) protobuf-check
	bash integration/scripts/generated-tables.sh

## The end-to-end suite's transparency cases against every supported
## kube-apiserver minor (integration/versions/minors.txt), each built from its
## own Go modules and started in turn; one summary line a minor
## (docs/versions.md). Not part of make test. MATRIX_MINORS chooses.
.PHONY: test-matrix
test-matrix:
	bash integration/scripts/matrix.sh

## The protobuf encoder against Go: the schema table has not drifted from the
## pinned k8s.io/api, and a fuzz corpus of every built-in kind (fixed seed, 3
## objects a kind) encodes byte for byte as Go does (docs/protobuf.md).
protobuf-check:
	bash integration/scripts/protobuf-check.sh

## The chart's alerts (promtool check and test rules), dashboard and nodeLocal
## metrics rendering, offline; then starts the API server (stopping it
## afterwards if it started it), runs the end-to-end suite and the Helm chart
## checks against it, then the image under runc (image-test.sh; Linux and root).
test-e2e:
	bash integration/scripts/monitoring-check.sh
	bash integration/scripts/e2e.sh

## Benchmarks (not part of make test); figures in docs/benchmarks.md. The
## whole set, with the cluster started once and the plots at the end (about
## 30 minutes on 2 cores; the matrix is chosen by the FANOUT_*, KUBELET_MS and
## RESTART_NS variables, see integration/scripts/bench-all.sh).
bench:
	bash integration/scripts/bench-all.sh

## Pass-through overhead, direct vs through watchmux.
bench-passthrough:
	bash integration/scripts/bench-passthrough.sh

## Fan-out to many watchers at several change rates and object sizes.
bench-fanout:
	bash integration/scripts/bench-fanout.sh

## Memory per idle HTTP/1.1 watcher, plain and TLS, one connection each
## IDLE_N watches (2000) of an empty namespace, RSS delta / N.
.PHONY: bench-idle-memory
bench-idle-memory:
	bash integration/scripts/bench-idle-memory.sh

## Kubelet-shaped load: M kubelets' pod, node, service, configmap, secret watches.
bench-kubelet:
	bash integration/scripts/bench-kubelet.sh

## Fairness under a LIST storm: M=1000 kubelets' time to
## synced beside 100 concurrent LISTs of 10,000 pods, direct and through
## watchmux (delegated), fairness on and off.
bench-fairness:
	bash integration/scripts/bench-fairness.sh

## A cluster at the scalability limits: SCALE=full (5,000 nodes,
## 150,000 pods; the default), light (500 / 15,000) or tiny; memory per cached
## object, LISTs of every pod and a kubelet storm, direct and through a tier.
## Replaces the test cluster's state with its own; figures in docs/benchmarks.md.
.PHONY: bench-scale
bench-scale:
	bash integration/scripts/bench-scale.sh

## Where one tier stops keeping up: bench-scale's storm through the tier at
## 1,000 to 5,000 kubelets (SWEEP_KUBELETS) on one loaded world.
.PHONY: bench-scale-sweep
bench-scale-sweep:
	bash integration/scripts/bench-scale-sweep.sh

## What one TLS handshake costs watchmux, RSA 2048 against ECDSA P-256.
.PHONY: bench-handshake
bench-handshake:
	bash integration/scripts/bench-handshake.sh

## What an idle tier and 20 node-locals cost kube-apiserver, per request kind.
.PHONY: bench-fleet-idle
bench-fleet-idle:
	bash integration/scripts/bench-fleet-idle.sh

## The ingest ceiling: one Pods cache fed by a synthetic HTTP/2 upstream in
## the bench process as fast as it takes events, 1,000 kubelet-shaped watchers
## and 100 unselected ones, on one core and on two: events applied and
## delivered a second, upstream write -> watcher receipt lag, and a perf
## profile at the ceiling (no cluster; docs/benchmarks.md, "Ingest ceiling").
.PHONY: bench-ingest
bench-ingest:
	bash integration/scripts/bench-ingest.sh

## Every core: watchmux on one core (its clients on the other) against two
## (shared with them), for deliveries a second (the ingest bench's open
## throttle with 100 unselected watchers) and bench-scale's 5,000-kubelet
## watch-list storm on a 5,000-node, 10,000-pod world (loaded into the test
## cluster if it does not hold it): the ratio against the goal of 1.8, CPU per
## thread and a perf profile of what serializes (about 12 minutes, 5 with the
## world loaded; CORES_PARTS chooses; docs/benchmarks.md, "Every core").
.PHONY: bench-cores
bench-cores:
	bash integration/scripts/bench-cores.sh

## A million objects: one Pods cache of 1,000,000 pods of 1 KiB from the
## ingest bench's synthetic upstream: RSS against the objects' JSON, a full
## and a paginated LIST (time, RSS growth), node-scoped LIST and watch-start
## latency with their floors, start-up cold and from the persisted store
## (about 4 minutes, 5 GiB of memory, no cluster; MILLION_CLUSTER_PODS=N adds
## kube-apiserver with N pods beside a tier; docs/benchmarks.md, "A million
## objects").
.PHONY: bench-million
bench-million:
	bash integration/scripts/bench-million.sh

## Fairness on the hot path: the fan-out bench with --fairness-seats 100 and
## 0 alternated (ABBA), watchmux CPU per 1,000 deliveries, and a perf
## profile's share in the fairness wrapper and the slow-watcher bookkeeping
## (about 5 minutes; its own cluster on 26379/18601; docs/benchmarks.md,
## "Fairness on the hot path").
.PHONY: bench-hotpath
bench-hotpath:
	bash integration/scripts/bench-hotpath.sh

## Memory after a storm, by allocator: bench-scale's watch-list storm through
## one tier with watchmux on glibc, jemalloc (the default) and mimalloc, and
## the same kubelets paced for the steady state (docs/benchmarks.md, "Memory
## after a storm"). Loads a 2,000-node world into the test cluster.
.PHONY: bench-alloc
bench-alloc:
	bash integration/scripts/bench-alloc.sh

## Restart storm: kube-apiserver restarted under N watchers.
bench-restart:
	bash integration/scripts/bench-restart.sh

## Balance after a rollout: two tiers of three replicas behind TCP
## balancers, 1,000 kubelet-shaped watchers each, rolled out side by side
## with the chart tier's --goaway-chance and --max-connection-age and with
## neither; connections per replica every 15 s for 10 minutes (about 15
## minutes; ports CHAOS_PORT 19400 and up; docs/benchmarks.md).
.PHONY: bench-rebalance
bench-rebalance:
	bash integration/scripts/bench-rebalance.sh

## One of three API servers killed, then frozen, under 5,000 watchers:
## through a plain TCP load balancer and through watchmux's --upstream-servers.
.PHONY: bench-failover
bench-failover:
	bash integration/scripts/bench-failover.sh

## A rolling control-plane upgrade, 1.36 to 1.37 one API server at a time,
## under 1,000 watchers and writes: through a plain TCP load balancer and
## through watchmux; events checked against etcd's own watch.
.PHONY: bench-upgrade
bench-upgrade:
	bash integration/scripts/bench-upgrade.sh

## A tier rollout, checked against etcd: three watchmux replicas behind a TCP
## balancer restarted one at a time under 1,000 watchers, 20 client-go
## informers and writes; with the backfill, without it (before), and
## kube-apiserver restarted under the same clients (about 3 minutes; ports
## 18601-18625, etcd 26379; docs/benchmarks.md).
.PHONY: bench-rollout
bench-rollout:
	bash integration/scripts/bench-rollout.sh

## PNG plots of the last results (.run/bench-*/) into docs/img/.
bench-plots:
	bash integration/scripts/bench-plots.sh

## Fault cases through watchmux against the real API server (the quick set
## below is the last step of make test; cases and figures in docs/chaos.md): kube-apiserver frozen,
## killed, half-open, compacted under a cut; etcd frozen; clients that never
## read or send slowly; watchmux killed; connect/disconnect rounds; a CRD
## deleted; large objects; the persisted store truncated, read-only, on a
## full disk. About 4 minutes on 2 cores; CHAOS_CASES chooses.
chaos: chaos-persist chaos-reboot
	bash integration/scripts/chaos.sh

## The persist store killed with SIGKILL at 1,000 random instants, each reload
## checked against the states it had committed (make test runs 20; about 5 min).
chaos-persist:
	WATCHMUX_PERSIST_CRASH_ITERATIONS=1000 $(CARGO) test --locked --lib a_store_killed_at_any_instant

## The offline reboot with the real control plane: a hollow node's
## watchmux and kubelet killed and restarted while the link to kube-apiserver
## is a black hole, with persistence and without, side by side (about 2 min;
## docs/node-local.md).
chaos-reboot:
	bash integration/scripts/reboot-scenario.sh

## The quick set: restart, compaction with a cut, CRD lifecycle, a truncated
## and a read-only persisted store (about a minute; the persist cases mount a tmpfs: root).
chaos-quick:
	CHAOS_CASES=quick bash integration/scripts/chaos.sh

## The quick fault cases as the last step of make test (about 90 s: restart,
## compaction with a cut, CRD lifecycle, persist-truncated, persist-readonly). They check behaviour, not speed, so
## they run the debug build the end-to-end suite made (same features) and a
## debug harness, instead of compiling watchmux again in release.
test-chaos-quick:
	BENCH_PROFILE=dev CHAOS_CASES=quick bash integration/scripts/chaos.sh

## The generative differential fuzzer of delegated auth against the real API
## server (integration/fuzz_auth): the corpus, then 20,000 generated cases
## (identities, impersonation, paths from discovery, selectors), each straight
## and through watchmux in both upstream-identity modes and offline from its
## persisted caches; an answer through
## watchmux that gives more is a failure. FUZZ_AUTH_SEED (random, printed),
## FUZZ_AUTH_CASES, FUZZ_AUTH_ONLY=<case> to reproduce one. A short seeded run
## (400 cases) is part of test-e2e. About 12 minutes on 2 cores, and 40 % more
## with the offline target.
fuzz-auth:
	bash integration/scripts/fuzz-auth.sh

## Dependency advisories (cargo-audit, local database: AUDIT_DB=...).
audit:
	bash integration/scripts/audit.sh

## Added latency of delegated auth on cached reads.
bench-auth:
	bash integration/scripts/bench-auth.sh

## Protobuf from the cache: watchmux's RSS with 10,000 pods with and without
## protobuf clients, informer CPU (direct protobuf, JSON and protobuf through
## watchmux), 1,000 watchers JSON against protobuf (docs/benchmarks.md).
bench-protobuf:
	bash integration/scripts/bench-protobuf.sh

## Gzip: CPU and bytes of a LIST and a watch-list sync of 10,000 pods,
## watchmux beside kube-apiserver, and the relist with and without gzip
## (docs/benchmarks.md, Compression).
bench-compress:
	bash integration/scripts/bench-compress.sh

## Tables: CPU of kubectl's Table LISTs (2,000 pods; 2,000 custom resources)
## and Table watches, watchmux beside kube-apiserver; TB_BASELINE_BIN
## alternates an earlier build (docs/benchmarks.md, Tables).
bench-table:
	bash integration/scripts/bench-table.sh

## The chart's alerts, dashboard and nodeLocal metrics rendering (offline).
monitoring-check:
	bash integration/scripts/monitoring-check.sh

## Real kube-scheduler, kube-controller-manager and kubemark hollow nodes
## (kubelet, kube-proxy) in four topologies, direct, node-local, tier and tree,
## with the same scenarios in each (integration/cmd/cpscenario). N=2 hollow
## nodes by default; builds them on first use (build-controlplane.sh).
controlplane-test:
	bash integration/scripts/controlplane-test.sh

## The control-plane scenarios as a step of make test, after the end-to-end
## suite: N=2, all four topologies, about 5 minutes warm (its own cluster, with
## NodeRestriction, started and stopped by the script).
test-controlplane: controlplane-test

## The API server's WATCH/LIST counts, CPU and RSS during start-up and a
## rollout, and the time until every pod is Running, for direct, node-local and
## tree (N=10 hollow nodes by default); figures in docs/benchmarks.md.
bench-controlplane:
	bash integration/scripts/bench-controlplane.sh

fmt:
	$(CARGO) fmt

clean:
	$(CARGO) clean
	rm -rf .run
