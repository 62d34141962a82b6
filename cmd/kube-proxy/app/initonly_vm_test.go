//go:build vmtest

package app

// Real-kernel test of --init-only: built with -tags vmtest and run as root inside
// the test VM (hack/vmtest.sh ./cmd/kube-proxy/app), whose kernel state is
// disposable. It writes global sysctls and /sys module parameters, so it never
// runs on the development host.

import (
	"os"
	"os/exec"
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

// TestVMInitOnlySetsIPVSSysctls: --init-only also makes the ipvs mode's kernel
// settings (loading ip_vs so that vs/* exists), each turned off first where it
// exists, so that a privileged init container leaves nothing for a
// CAP_NET_ADMIN-only main container to write.
func TestVMInitOnlySetsIPVSSysctls(t *testing.T) {
	resetLogging := func() {
		if err := logsapi.ResetForTest(newFeatureGate()); err != nil {
			t.Fatal(err)
		}
	}
	resetLogging()
	t.Cleanup(resetLogging)
	s := sysctl.New()
	want := map[string]int{
		"net/ipv4/vs/conntrack":                 1,
		"net/ipv4/vs/expire_nodest_conn":        1,
		"net/ipv4/vs/expire_quiescent_template": 1,
		"net/ipv4/ip_forward":                   1,
		"net/ipv4/conf/all/arp_ignore":          1,
		"net/ipv4/conf/all/arp_announce":        2,
	}
	for name := range want {
		if err := s.SetSysctl(name, 0); err != nil {
			t.Logf("%s not set to 0 first: %v (ip_vs not loaded yet: --init-only must load it)", name, err)
		}
	}
	connReuse, connReuseErr := s.GetSysctl("net/ipv4/vs/conn_reuse_mode")
	code, _, errOut := run(t, "--init-only", "--ipvs-strict-arp", "--ipvs-tcp-timeout=7m", "--ipvs-udp-timeout=45s", "--conntrack-max-per-core=0")
	if code != 0 {
		t.Fatalf("--init-only exited %d: %s", code, errOut)
	}
	for name, w := range want {
		if got, err := s.GetSysctl(name); err != nil || got != w {
			t.Errorf("%s = %d (%v), want %d", name, got, err, w)
		}
	}
	// Debian's 6.1 kernel is not one of the 4.1-5.8 kernels whose
	// conn_reuse_mode is set to 0: the value stays as it was.
	if got, err := s.GetSysctl("net/ipv4/vs/conn_reuse_mode"); err != nil || (connReuseErr == nil && got != connReuse) {
		t.Errorf("conn_reuse_mode = %d (%v), was %d (%v): must be left alone on 6.1", got, err, connReuse, connReuseErr)
	}
	// The IPVS timeouts, as ipvsadm shows them: "Timeout (tcp tcpfin udp): 420 120 45".
	out, err := exec.Command("ipvsadm", "-L", "--timeout").CombinedOutput()
	if err != nil {
		t.Fatalf("ipvsadm -L --timeout: %v: %s", err, out)
	}
	if !strings.Contains(string(out), "420 120 45") {
		t.Errorf("IPVS timeouts after --init-only: %q, want tcp 420 tcpfin 120 (kernel default) udp 45", strings.TrimSpace(string(out)))
	}
}
