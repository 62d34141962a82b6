package netns

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

func TestRunPattern(t *testing.T) {
	for name, want := range map[string]string{
		"TestA":           "^TestA$",
		"TestA/sub_1":     "^TestA$/^sub_1$",
		"TestA/x.y(z)+":   `^TestA$/^x\.y\(z\)\+$`,
		"BenchmarkFoo/10": "^BenchmarkFoo$/^10$",
	} {
		if got := runPattern(name); got != want {
			t.Errorf("runPattern(%q) = %q, want %q", name, got, want)
		}
	}
}

// TestIntegrationRunIsolates checks that the body runs in a namespace whose only
// link is lo (up), with a private /run and a sysfs that shows that namespace.
func TestIntegrationRunIsolates(t *testing.T) {
	hostNet, err := nsID("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	ran := false
	Run(t, func(t *testing.T) {
		ran = true
		self, err := nsID("/proc/self/ns/net")
		if err != nil {
			t.Fatal(err)
		}
		if self == os.Getenv(envParentNet) {
			t.Fatalf("body runs in the parent's network namespace %s", self)
		}
		if priv, err := InPrivateNamespace(); err != nil || !priv {
			t.Fatalf("InPrivateNamespace() = %v, %v; want true", priv, err)
		}
		entries, err := os.ReadDir("/sys/class/net")
		if err != nil {
			t.Fatal(err)
		}
		var links []string
		for _, e := range entries {
			links = append(links, e.Name())
		}
		if strings.Join(links, ",") != "lo" {
			t.Errorf("/sys/class/net = %v, want only lo", links)
		}
		out, err := exec.Command("ip", "-o", "link", "show", "lo").CombinedOutput()
		if err != nil {
			t.Fatalf("ip link show lo: %v: %s", err, out)
		}
		if !strings.Contains(string(out), "UP") {
			t.Errorf("lo is not up: %s", out)
		}
		if err := os.WriteFile("/run/xtables.lock", nil, 0o600); err != nil {
			t.Fatalf("writing the private /run: %v", err)
		}
	})
	// In the parent the body must not have run, and the private /run must not leak.
	if os.Getenv(envTest) == "" {
		if ran {
			t.Fatal("body ran in the parent process")
		}
		if self, _ := nsID("/proc/self/ns/net"); self != hostNet {
			t.Fatal("parent changed namespace")
		}
	}
}

// TestIntegrationChildFailurePropagates runs a child that fails on purpose (only
// when asked to by the parent test below) and checks the parent sees the failure.
func TestIntegrationChildFailurePropagates(t *testing.T) {
	if os.Getenv("NETNS_TEST_INNER_FAIL") == "1" {
		Run(t, func(t *testing.T) { t.Fatal("deliberate failure") })
		return
	}
	if os.Geteuid() != 0 {
		t.Skip("SKIPPING: needs root")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, "-test.run", "^TestIntegrationChildFailurePropagates$", "-test.v")
	cmd.Env = append(os.Environ(), "NETNS_TEST_INNER_FAIL=1")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("a failing body did not fail the parent:\n%s", out)
	}
	if !strings.Contains(string(out), "deliberate failure") || !strings.Contains(string(out), "failed in its private network namespace") {
		t.Fatalf("parent output does not show the child failure:\n%s", out)
	}
}

// TestIntegrationChildSkipPropagates checks that a body that skips makes the
// parent skip too (so hack/integration.sh can see it) instead of passing.
func TestIntegrationChildSkipPropagates(t *testing.T) {
	if os.Getenv("NETNS_TEST_INNER_SKIP") == "1" {
		Run(t, func(t *testing.T) { t.Skip("deliberate skip") })
		return
	}
	if os.Geteuid() != 0 {
		t.Skip("SKIPPING: needs root")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, "-test.run", "^TestIntegrationChildSkipPropagates$", "-test.v")
	cmd.Env = append(os.Environ(), "NETNS_TEST_INNER_SKIP=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("a skipping body failed the parent: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "--- SKIP: TestIntegrationChildSkipPropagates") || !strings.Contains(string(out), "deliberate skip") {
		t.Fatalf("parent did not skip with the child's reason:\n%s", out)
	}
}
