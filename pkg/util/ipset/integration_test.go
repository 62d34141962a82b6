package ipset

// Real-kernel tests: each runs in its own network namespace (netns.Run), where the
// ipsets and iptables rules it creates live and die with the namespace.

import (
	"os/exec"
	"testing"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/testing/netns"
	utilexec "k8s.io/utils/exec"
)

func mustRun(t *testing.T, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %v: %v: %s", name, args, err, out)
	}
}

// resetKernel removes every rule and set of the namespace between subtests.
func resetKernel(t *testing.T) {
	t.Helper()
	mustRun(t, "iptables-legacy", "-t", "filter", "-F")
	mustRun(t, "ipset", "destroy")
}

func TestIntegrationConformance(t *testing.T) {
	netns.Run(t, func(t *testing.T) {
		runScenarios(t, func(t *testing.T) (Interface, referenceFunc) {
			resetKernel(t)
			return New(utilexec.New()), func(t *testing.T, set string) {
				mustRun(t, "iptables-legacy", "-t", "filter", "-A", "INPUT", "-m", "set", "--match-set", set, "src", "-j", "ACCEPT")
			}
		})
	})
}
