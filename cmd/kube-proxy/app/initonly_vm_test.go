//go:build vmtest

package app

// Real-kernel test of --init-only: built with -tags vmtest and run as root inside
// the test VM (hack/vmtest.sh ./cmd/kube-proxy/app), whose kernel state is
// disposable. It writes global sysctls and /sys module parameters, so it never
// runs on the development host.

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	logsapi "k8s.io/component-base/logs/api/v1"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/sysctl"
)

func TestVMInitOnlySetsConntrackAndOOM(t *testing.T) {
	// Each in-process run applies the logging configuration, once per process.
	resetLogging := func() {
		if err := logsapi.ResetForTest(newFeatureGate()); err != nil {
			t.Fatal(err)
		}
	}
	resetLogging()
	t.Cleanup(resetLogging)
	code, _, errOut := run(t,
		"--init-only",
		"--oom-score-adj=-500",
		"--conntrack-max-per-core=0", "--conntrack-min=0", // leave nf_conntrack_max alone...
		"--conntrack-tcp-timeout-established=2h",
		"--conntrack-tcp-timeout-close-wait=20m",
		"--conntrack-tcp-be-liberal",
		"--conntrack-udp-timeout=40s",
		"--conntrack-udp-timeout-stream=3m",
	)
	if code != 0 {
		t.Fatalf("--init-only exited %d: %s", code, errOut)
	}
	s := sysctl.New()
	for name, want := range map[string]int{
		sysctlTCPEstablishedTimeout: 7200,
		sysctlTCPCloseWaitTimeout:   1200,
		sysctlTCPBeLiberal:          1,
		sysctlUDPTimeout:            40,
		sysctlUDPStreamTimeout:      180,
	} {
		got, err := s.GetSysctl(name)
		if err != nil || got != want {
			t.Errorf("%s = %d (%v), want %d", name, got, err, want)
		}
	}
	data, err := os.ReadFile("/proc/self/oom_score_adj")
	if err != nil || strings.TrimSpace(string(data)) != "-500" {
		t.Errorf("oom_score_adj %q (%v), want -500", data, err)
	}

	// ...and now the scaled maximum and the hash table behind it.
	resetLogging()
	code, _, errOut = run(t, "--init-only", "--conntrack-max-per-core=1", "--conntrack-min=262144")
	if code != 0 {
		t.Fatalf("--init-only exited %d: %s", code, errOut)
	}
	if got, err := s.GetSysctl(sysctlConntrackMax); err != nil || got != 262144 {
		t.Errorf("nf_conntrack_max = %d (%v), want 262144", got, err)
	}
	hs, err := os.ReadFile(filepath.Join(defaultSysRoot, conntrackHashsizeParameterRel))
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := strconv.Atoi(strings.TrimSpace(string(hs))); n < 262144/4 {
		t.Errorf("hashsize %d, want at least %d", n, 262144/4)
	}
}
