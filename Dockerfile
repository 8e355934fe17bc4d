# syntax=docker/dockerfile:1
# watchmux container image: a static-ish Rust binary on distroless, non-root.
#
#   docker build -t watchmux:dev .
#   docker run --rm -p 6443:6443 -p 9444:9444 -v ~/.kube:/kube:ro watchmux:dev \
#     --kubeconfig=/kube/config --listen=0.0.0.0:6443 --admin-listen=0.0.0.0:9444 \
#     --auth-mode=delegated
# (the default trusted-local mode listens only on loopback: see docs/auth.md)
#
# In Kubernetes the Helm chart (charts/watchmux) passes every flag itself.

ARG RUST_VERSION=1.95

# --- build -----------------------------------------------------------------------
# Debian 12 (bookworm), the same C library as the runtime image below.
FROM rust:${RUST_VERSION}-slim-bookworm AS build
WORKDIR /src
# .dockerignore lets in only what the build reads: Cargo.toml, Cargo.lock, src/
# and the Rust sources of the test targets the manifest names.
COPY . .
# The registry and target caches survive between builds (BuildKit); the binary
# is copied out of the cached target directory.
RUN --mount=type=cache,target=/usr/local/cargo/registry,sharing=locked \
    --mount=type=cache,target=/usr/local/cargo/git,sharing=locked \
    --mount=type=cache,target=/src/target,sharing=locked \
    cargo build --release --locked --bin watchmux \
 && install -D -m 0755 target/release/watchmux /out/watchmux

# --- runtime ---------------------------------------------------------------------
# glibc, libgcc and CA certificates only: no shell, no package manager.
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /out/watchmux /watchmux
# distroless "nonroot": uid/gid 65532, as the chart's securityContext expects.
USER 65532:65532
# 6443: the API listener (HTTP/1.1 + HTTP/2, TLS with --tls-cert-file).
# 9444: the admin listener (/metrics, /healthz, /livez, /readyz).
EXPOSE 6443 9444
ENTRYPOINT ["/watchmux"]
# The admin port must be reachable from outside the container (probes,
# metrics). The API listener stays on loopback: in the default trusted-local
# mode every client acts as watchmux, so only the pod itself may reach it (a
# sidecar). Shared proxies pass --auth-mode=delegated --listen=0.0.0.0:6443.
# Any arguments given at run time replace these.
CMD ["--listen=127.0.0.1:6443", "--admin-listen=0.0.0.0:9444"]
