package main

import (
	"strings"
	"testing"
)

// TestHistoryNamesEveryStep: the image's history lists the RUN and COPY
// instructions of the runtime stage in their order, then the binary's COPY.
func TestHistoryNamesEveryStep(t *testing.T) {
	p, err := parsePlan("from: debian:bookworm-slim\nrun: apt-get update\ncopy: --chmod=0755 hack/image/iptables-wrapper /usr/sbin/iptables-wrapper\nrun: update-alternatives --install x\nbinary: /usr/local/bin/kube-proxy\nentrypoint: /usr/local/bin/kube-proxy\n")
	if err != nil {
		t.Fatal(err)
	}
	want := "FROM debian:bookworm-slim; RUN apt-get update; COPY --chmod=0755 hack/image/iptables-wrapper /usr/sbin/iptables-wrapper; RUN update-alternatives --install x; COPY --from=build /usr/local/bin/kube-proxy"
	if got := p.history(); !strings.HasPrefix(got, want) {
		t.Errorf("history %q, want it to begin with %q", got, want)
	}
}
