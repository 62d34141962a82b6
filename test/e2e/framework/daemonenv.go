package framework

import (
	"context"
	"fmt"
	"strings"
)

// NFTLivenessEnv is the environment variable that sets the lifetime of the
// nftables backend's liveness element (pkg/proxy/ipvs/nftalive.go), for
// scenarios that roll back and must not wait minutes for our rules to lapse.
const NFTLivenessEnv = "KUBE_PROXY_IPVS_NFT_LIVENESS_TIMEOUT"

// StartKubeProxyWithEnv is StartKubeProxy with environment variables
// ("NAME=VALUE") for the daemon. env(1) execs it, so the PID the agent returns
// is the daemon's, as StopKubeProxy needs.
func (n *Node) StartKubeProxyWithEnv(ctx context.Context, cp *ControlPlane, config string, env []string, flags ...string) error {
	for _, e := range env {
		if !strings.Contains(e, "=") {
			return fmt.Errorf("environment variable %q: want NAME=VALUE", e)
		}
	}
	if err := n.VM.WriteFile(ctx, "/kpi/kube-proxy/kubeconfig", cp.ProxyKubeconfig(), 0o600); err != nil {
		return err
	}
	if err := n.VM.WriteFile(ctx, "/kpi/kube-proxy/config.yaml", []byte(config), 0o644); err != nil {
		return err
	}
	argv := n.VM.KubeProxyCommand(append([]string{
		"--config=/kpi/kube-proxy/config.yaml", "--kubeconfig=/kpi/kube-proxy/kubeconfig", "--v=2"}, withBackend(flags)...)...)
	pid, err := n.VM.Start(ctx, n.ProxyLogPath, append(append([]string{"env"}, env...), argv...)...)
	if err != nil {
		return fmt.Errorf("starting kube-proxy in the VM: %w", err)
	}
	n.proxyPID = pid
	return nil
}
