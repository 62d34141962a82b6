# syntax=docker/dockerfile:1
# kube-proxy-ipvs: a drop-in replacement for kube-proxy --proxy-mode=ipvs.
#
#   docker build -t kube-proxy-ipvs:dev .        (or: make image)
#
# Stage 1 builds a static binary; stage 2 is Debian with the userspace tools the
# daemon drives (iptables-restore in both the legacy and nft backends, ipset) and
# the ones operators expect in a kube-proxy image for debugging (ipvsadm,
# conntrack, kmod for modprobe of ip_vs*).

FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=v0.0.0-dev
RUN CGO_ENABLED=0 GOOS=linux go build -trimpath \
      -ldflags "-s -w -X k8s.io/component-base/version.gitVersion=${VERSION}" \
      -o /out/kube-proxy ./cmd/kube-proxy

# The e2e suite replays this stage without a registry (hack/image-rootfs.sh:
# mmdebstrap, then these RUN and COPY lines in order) and runs the daemon from
# the result: keep it FROM debian:<suite>[-slim], ARG, LABEL, RUN,
# COPY [--chmod=MODE] FILE DST (one file of the build context), COPY --from=build
# and ENTRYPOINT.
FROM debian:bookworm-slim
# OCI labels; make release sets the same ones on the image it writes
# (hack/release.sh: the release version, the commit and its date).
ARG VERSION=v0.0.0-dev
ARG REVISION=unknown
ARG CREATED=1970-01-01T00:00:00Z
LABEL org.opencontainers.image.title=kube-proxy-ipvs \
      org.opencontainers.image.source=https://github.com/kube-proxy-ipvs/kube-proxy-ipvs \
      org.opencontainers.image.licenses=Apache-2.0 \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}"
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      iptables ipset conntrack ipvsadm kmod nftables ca-certificates \
 && rm -rf /var/lib/apt/lists/*
# Debian's iptables package ships both backends. As in upstream's image, the
# iptables and ip6tables commands (and their -save and -restore) start as a
# wrapper whose first call in a container picks the node's backend, legacy or
# nft, the way the daemon picks its own (hack/image/iptables-wrapper), and
# points the alternatives at it. The daemon itself always runs
# iptables-legacy-* or iptables-nft-* by name.
COPY --chmod=0755 hack/image/iptables-wrapper /usr/sbin/iptables-wrapper
RUN for f in iptables ip6tables; do \
      update-alternatives --install /usr/sbin/$f $f /usr/sbin/iptables-wrapper 100 \
        --slave /usr/sbin/$f-restore $f-restore /usr/sbin/iptables-wrapper \
        --slave /usr/sbin/$f-save $f-save /usr/sbin/iptables-wrapper \
      && update-alternatives --set $f /usr/sbin/iptables-wrapper || exit 1; \
    done
COPY --from=build /out/kube-proxy /usr/local/bin/kube-proxy
ENTRYPOINT ["/usr/local/bin/kube-proxy"]
