# watchmux's container image: the release binary and the few shared libraries
# it links, on nothing, run as a non-root user.
#
# This file is the image's one recipe, and `make image` is how it is built:
# integration/scripts/image.sh stages the build context in .run/image/context
# (base/: the C library, libgcc_s, their copyright notices, /etc/passwd, group
# and nsswitch.conf; watchmux: the release binary, debug info stripped) and
# integration/tools/image (ocibuild, go-containerregistry) builds this file
# on it into an OCI archive, without a container daemon. ocibuild knows only
# the instructions below (and ENV, WORKDIR, STOPSIGNAL) and refuses any other,
# so nothing here can be skipped silently. `make test` runs the image with
# runc (integration/scripts/image-test.sh). See docs/image.md.
#
# There is no build stage: building the binary is cargo's job, outside.

FROM scratch

# Set by image.sh: the crate version, the git commit, the repository URL.
ARG VERSION
ARG REVISION
ARG SOURCE

# One layer that changes only with the build machine's C library, then one
# with the binary.
COPY base/ /
COPY watchmux /watchmux

# "nonroot" in base/etc/passwd; numeric, so a runtime can check runAsNonRoot.
USER 65532:65532
# 7443: the API listener (HTTP/1.1 + HTTP/2, TLS with --tls-cert-file); not
# 6443, kube-apiserver's on a control-plane node.
# 9444: the admin listener (/metrics, /healthz, /livez, /readyz).
EXPOSE 7443 9444
ENTRYPOINT ["/watchmux"]
# The admin port must be reachable from outside the container (probes,
# metrics). The API listener stays on loopback: in the default trusted-local
# mode every client acts as watchmux, so only the pod itself may reach it (a
# sidecar). Shared proxies pass --auth-mode=delegated --listen=:7443.
# Any arguments given at run time replace these.
CMD ["--listen=127.0.0.1:7443", "--admin-listen=0.0.0.0:9444"]

LABEL org.opencontainers.image.title="watchmux" \
      org.opencontainers.image.description="A transparent caching watch proxy for the Kubernetes API" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.source="${SOURCE}"
