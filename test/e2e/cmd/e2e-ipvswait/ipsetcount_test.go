package main

import (
	"os/exec"
	"testing"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/testing/netns"
)

// TestIntegrationIPSetEntries: the poller's netlink read of a set's size
// agrees with what was added, on the real kernel (hack/integration.sh).
func TestIntegrationIPSetEntries(t *testing.T) {
	netns.Run(t, func(t *testing.T) {
		run := func(args ...string) {
			if out, err := exec.Command("ipset", args...).CombinedOutput(); err != nil {
				t.Fatalf("ipset %v: %v %s", args, err, out)
			}
		}
		run("create", "KPI-T", "hash:ip,port,ip")
		for n, want := range []int{0, 3} {
			if n > 0 {
				run("add", "KPI-T", "10.0.0.1,tcp:80,10.0.0.1")
				run("add", "KPI-T", "10.0.0.2,tcp:80,10.0.0.2")
				run("add", "KPI-T", "10.0.0.3,udp:53,10.0.0.3")
			}
			got, err := ipsetEntries("KPI-T")
			if err != nil || got != want {
				t.Fatalf("ipsetEntries = %d, %v; want %d", got, err, want)
			}
		}
		if _, err := ipsetEntries("KPI-NONE"); err == nil {
			t.Fatal("a missing set: no error")
		}
	})
}
