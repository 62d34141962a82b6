//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/test/e2e/framework"
)

// Upstream kube-proxy v1.37.2 in the VM: the migration scenarios
// (migration_test.go) and the scale run (scale_test.go) run it next to ours.

// upstreamKubeProxyBin is the guest path of upstream kube-proxy.
const upstreamKubeProxyBin = "/kpi/bin/kube-proxy-upstream"

// upstreamVMFiles puts upstream kube-proxy into the VM: the binary
// test/e2e/lib/build-tools.sh builds (cached; run.sh has built it already) or
// $KPI_UPSTREAM_KUBE_PROXY.
func upstreamVMFiles() (map[string]string, error) {
	bin := os.Getenv("KPI_UPSTREAM_KUBE_PROXY")
	if bin == "" {
		root, err := framework.RepoRoot()
		if err != nil {
			return nil, err
		}
		out, err := exec.Command(filepath.Join(root, "test/e2e/lib/build-tools.sh")).Output()
		if err != nil {
			return nil, fmt.Errorf("building upstream kube-proxy (test/e2e/lib/build-tools.sh): %w", err)
		}
		bin = filepath.Join(strings.TrimSpace(string(out)), "kube-proxy")
	}
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("upstream kube-proxy: %w", err)
	}
	return map[string]string{upstreamKubeProxyBin: bin}, nil
}

// vmKubeProxy is one kube-proxy binary run in the VM with a config file at
// /kpi/kube-proxy/config.yaml (the path our daemon's config has) and the
// system:kube-proxy kubeconfig, outside framework.Node's bookkeeping of our
// daemon.
type vmKubeProxy struct {
	name string // "ours" or "upstream"
	bin  string // guest path
	log  string // guest path of its log
	pid  int
	// rulesBackend is ours' --ipvs-rules-backend ("" = the default, iptables).
	rulesBackend string
	// args are more command-line arguments.
	args []string
	// disableCompression puts disable-compression: true in its kubeconfig: the
	// apiserver then sends its lists and watches without gzip.
	disableCompression bool
}

func (p *vmKubeProxy) start(ctx context.Context, config string) error {
	kubeconfig := cp.ProxyKubeconfig()
	if p.disableCompression {
		kubeconfig = bytes.Replace(kubeconfig, []byte("\n    server: "), []byte("\n    disable-compression: true\n    server: "), 1)
	}
	if err := vm.WriteFile(ctx, "/kpi/kube-proxy/kubeconfig", kubeconfig, 0o600); err != nil {
		return err
	}
	if err := vm.WriteFile(ctx, "/kpi/kube-proxy/config.yaml", []byte(config), 0o644); err != nil {
		return err
	}
	argv := []string{p.bin, "--config=/kpi/kube-proxy/config.yaml", "--kubeconfig=/kpi/kube-proxy/kubeconfig", "--v=2"}
	if p.rulesBackend != "" {
		argv = append(argv, "--ipvs-rules-backend="+p.rulesBackend)
	}
	argv = append(argv, p.args...)
	// KPI_E2E_DAEMON_ENV: space-separated NAME=VALUE pairs every kube-proxy of the
	// run gets (client-go's KUBE_FEATURE_* gates, GODEBUG, ...).
	if env := strings.Fields(os.Getenv("KPI_E2E_DAEMON_ENV")); len(env) > 0 {
		argv = append(append([]string{"env"}, env...), argv...)
	}
	pid, err := vm.Start(ctx, p.log, argv...)
	if err != nil {
		return fmt.Errorf("starting %s kube-proxy in the VM: %w", p.name, err)
	}
	p.pid = pid
	return nil
}

// running reports whether the process is alive; an agent round trip that
// fails (under load it can) is asked again, up to three times, and counts as
// alive if no answer comes: only the VM saying so makes it dead.
func (p *vmKubeProxy) running(ctx context.Context) bool {
	if p.pid == 0 {
		return false
	}
	for range 3 {
		r, err := vm.Exec(ctx, "bash", "-c", fmt.Sprintf("test -d /proc/%d && ! grep -q '^State:.*Z' /proc/%d/status", p.pid, p.pid))
		if err == nil {
			return r.ExitCode == 0
		}
		time.Sleep(time.Second)
	}
	return true
}

// stop sends SIGTERM, then SIGKILL after 30 s.
func (p *vmKubeProxy) stop(ctx context.Context) error {
	if p.pid == 0 {
		return nil
	}
	defer func() { p.pid = 0 }()
	if !p.running(ctx) {
		return nil
	}
	if err := vm.Signal(ctx, p.pid, syscall.SIGTERM); err != nil {
		return err
	}
	err := framework.Eventually(ctx, 30*time.Second, 500*time.Millisecond, func(ctx context.Context) error {
		if p.running(ctx) {
			return fmt.Errorf("%s kube-proxy (pid %d) still running", p.name, p.pid)
		}
		return nil
	})
	if err != nil {
		_ = vm.Signal(ctx, p.pid, syscall.SIGKILL)
	}
	return err
}

func (p *vmKubeProxy) logTail(ctx context.Context, lines int) string {
	out, _ := vm.Sh(ctx, fmt.Sprintf("tail -n %d %s 2>&1", lines, p.log))
	return out
}
