package framework

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"time"
)

// Node wraps the VM as a Kubernetes node: pods on cbr0 and our kube-proxy.
type Node struct {
	VM           *VM
	proxyPID     int
	ProxyLogPath string
}

// SetupNode creates the pod bridge in the VM.
func SetupNode(ctx context.Context, vm *VM) (*Node, error) {
	if _, err := vm.Sh(ctx, "bash /kpi/scripts/node-setup.sh"); err != nil {
		return nil, fmt.Errorf("setting up the node: %w", err)
	}
	return &Node{VM: vm, ProxyLogPath: "/tmp/kube-proxy.log"}, nil
}

// Pod is a network namespace on cbr0 running the e2e-agent server.
type Pod struct {
	Name string
	IP   string
	IP6  string // "" for a single-stack pod
	pid  int
}

// AddPod creates a pod namespace with ip (and ip6, if given: a dual-stack pod)
// and starts its server on port 8080 (TCP, UDP and SCTP), then waits until the
// node can reach it directly.
func (n *Node) AddPod(ctx context.Context, name, ip string, ip6 ...string) (*Pod, error) {
	if _, err := n.VM.Sh(ctx, fmt.Sprintf("bash /kpi/scripts/pod.sh add %s %s %s", name, ip, strings.Join(ip6, " "))); err != nil {
		return nil, fmt.Errorf("creating pod %s: %w", name, err)
	}
	pid, err := n.VM.Start(ctx, "/tmp/pod-"+name+".log", "ip", "netns", "exec", name,
		"/kpi/bin/e2e-agent", "serve", "--name", name, "--port", "8080", "--sctp")
	if err != nil {
		return nil, err
	}
	p := &Pod{Name: name, IP: ip, pid: pid}
	addrs := []string{ip + ":8080"}
	if len(ip6) > 0 {
		p.IP6 = ip6[0]
		addrs = append(addrs, "["+p.IP6+"]:8080")
	}
	err = Eventually(ctx, 30*time.Second, 300*time.Millisecond, func(ctx context.Context) error {
		for _, a := range addrs {
			out, err := n.Client(ctx, "tcp", a, 1)
			if err != nil {
				return err
			}
			if !strings.HasPrefix(out, name+" ") {
				return fmt.Errorf("pod %s answered %q on %s", name, out, a)
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("pod %s (%s) not answering: %w", name, ip, err)
	}
	return p, nil
}

// DeletePod stops a pod's server and removes its namespace.
func (n *Node) DeletePod(ctx context.Context, p *Pod) error {
	_ = n.VM.Signal(ctx, p.pid, syscall.SIGKILL)
	_, err := n.VM.Sh(ctx, "bash /kpi/scripts/pod.sh del "+p.Name)
	return err
}

// Client runs `e2e-agent client` from the node's root namespace and returns
// its output (one line per attempt) whatever its exit code.
func (n *Node) Client(ctx context.Context, proto, addr string, count int) (string, error) {
	return n.ClientFrom(ctx, "", proto, addr, count)
}

// ClientFrom is Client run inside pod namespace ns ("" = the node).
func (n *Node) ClientFrom(ctx context.Context, ns, proto, addr string, count int) (string, error) {
	argv := []string{"/kpi/bin/e2e-agent", "client", "--proto", proto, "--addr", addr, "--count", fmt.Sprint(count), "--timeout", "2s"}
	if ns != "" {
		argv = append([]string{"ip", "netns", "exec", ns}, argv...)
	}
	r, err := n.VM.Exec(ctx, argv...)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(r.Stdout), nil
}

// KubeProxyConfig is the KubeProxyConfiguration our kube-proxy runs with in
// the VM; extra is appended verbatim (more top-level fields).
func KubeProxyConfig(extra string) string {
	return `apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: ipvs
clientConnection:
  kubeconfig: /kpi/kube-proxy/kubeconfig
hostnameOverride: ` + NodeName + `
clusterCIDR: 10.244.0.0/16,fd00:244::/48
metricsBindAddress: 127.0.0.1:10249
healthzBindAddress: 0.0.0.0:10256
conntrack:
  maxPerCore: 0
ipvs:
  scheduler: rr
  syncPeriod: 10s
  minSyncPeriod: 0s
` + extra
}

// StartKubeProxy starts our kube-proxy in the VM as in production (from the
// image root filesystem when the VM has one: VM.KubeProxyCommand): --config
// with a KubeProxyConfiguration (mode ipvs) and --kubeconfig with the
// system:kube-proxy token pointing at https://10.0.2.100:6443; flags are
// more command-line flags (e.g. NFTablesBackend; without a backend flag, the
// pass's backend: RulesBackend).
func (n *Node) StartKubeProxy(ctx context.Context, cp *ControlPlane, config string, flags ...string) error {
	if err := n.VM.WriteFile(ctx, "/kpi/kube-proxy/kubeconfig", cp.ProxyKubeconfig(), 0o600); err != nil {
		return err
	}
	if err := n.VM.WriteFile(ctx, "/kpi/kube-proxy/config.yaml", []byte(config), 0o644); err != nil {
		return err
	}
	pid, err := n.VM.Start(ctx, n.ProxyLogPath, n.VM.KubeProxyCommand(append([]string{
		"--config=/kpi/kube-proxy/config.yaml", "--kubeconfig=/kpi/kube-proxy/kubeconfig", "--v=2"}, withBackend(flags)...)...)...)
	if err != nil {
		return fmt.Errorf("starting kube-proxy in the VM: %w", err)
	}
	n.proxyPID = pid
	return nil
}

// KubeProxyPID is the daemon's process id in the VM (0 when not started).
func (n *Node) KubeProxyPID() int { return n.proxyPID }

// KubeProxyRunning reports whether the kube-proxy process is still alive.
func (n *Node) KubeProxyRunning(ctx context.Context) bool {
	if n.proxyPID == 0 {
		return false
	}
	r, err := n.VM.Exec(ctx, "bash", "-c", fmt.Sprintf("test -d /proc/%d && ! grep -q '^State:.*Z' /proc/%d/status", n.proxyPID, n.proxyPID))
	return err == nil && r.ExitCode == 0
}

// StopKubeProxy sends SIGTERM and waits up to 20 s for it to exit.
func (n *Node) StopKubeProxy(ctx context.Context) error {
	if n.proxyPID == 0 || !n.KubeProxyRunning(ctx) {
		n.proxyPID = 0
		return nil
	}
	if err := n.VM.Signal(ctx, n.proxyPID, syscall.SIGTERM); err != nil {
		return err
	}
	err := Eventually(ctx, 20*time.Second, 500*time.Millisecond, func(ctx context.Context) error {
		if n.KubeProxyRunning(ctx) {
			return fmt.Errorf("kube-proxy (pid %d) still running", n.proxyPID)
		}
		return nil
	})
	n.proxyPID = 0
	return err
}

// KubeProxyLog returns the last lines of kube-proxy's log in the VM.
func (n *Node) KubeProxyLog(ctx context.Context, lines int) string {
	out, _ := n.VM.Sh(ctx, fmt.Sprintf("tail -n %d %s 2>&1", lines, n.ProxyLogPath))
	return out
}

// KernelState dumps what a reviewer wants to see after a failure.
func (n *Node) KernelState(ctx context.Context) string {
	out, _ := n.VM.Sh(ctx, `echo '# ipvsadm -Ln'; ipvsadm -Ln 2>&1; echo '# ip addr show kube-ipvs0'; ip addr show kube-ipvs0 2>&1;
echo '# ipset list -t'; ipset list -t 2>&1 | head -80; echo '# iptables-save'; iptables-save 2>&1 | head -120
`+nftTableDump)
	return out
}

// NFTablesBackend is the flag that runs our daemon with the nftables rules
// backend (table NFTablesTable instead of ipsets and iptables chains).
const (
	NFTablesBackend = "--ipvs-rules-backend=nftables"
	NFTablesTable   = "inet kube-proxy-ipvs"
)

// nftTableDump is a guest script printing the nftables backend's table, if any.
const nftTableDump = `echo '# nft list table ` + NFTablesTable + `'; nft list table ` + NFTablesTable + ` 2>&1 | head -200`

// rulesReadyScript succeeds once either rules backend wrote its services
// chain: nat KUBE-SERVICES (iptables) or ip-services in the nftables table.
const rulesReadyScript = `ip link show kube-ipvs0 >/dev/null && { iptables-save -t nat | grep -q '^:KUBE-SERVICES' || nft list chain ` + NFTablesTable + ` ip-services >/dev/null 2>&1; }`

// WaitKubeProxyReady waits until kube-proxy has created its dummy interface
// kube-ipvs0 and its services chain (nat KUBE-SERVICES, or ip-services in the
// nftables backend's table); it gives up at once if the process exits, and
// returns the log tail with any error.
func (n *Node) WaitKubeProxyReady(ctx context.Context, timeout time.Duration) error {
	err := Eventually(ctx, timeout, time.Second, func(ctx context.Context) error {
		if !n.KubeProxyRunning(ctx) {
			return StopTrying(fmt.Errorf("kube-proxy exited"))
		}
		if _, err := n.VM.Sh(ctx, rulesReadyScript); err != nil {
			return fmt.Errorf("kube-ipvs0 or the services chain not there yet")
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("%w\nkube-proxy log tail:\n%s", err, n.KubeProxyLog(ctx, 40))
	}
	return nil
}

// VirtualServer returns the real servers IPVS holds for one virtual server as
// "ip:port forward weight" (sorted), e.g. ("TCP", "10.96.0.10:80") ->
// ["10.244.0.21:8080 Masq 1", ...].
func (n *Node) VirtualServer(ctx context.Context, proto, vip string) ([]string, error) {
	flag := map[string]string{"TCP": "-t", "UDP": "-u", "SCTP": "--sctp-service"}[proto]
	out, err := n.VM.Sh(ctx, fmt.Sprintf("ipvsadm -Ln %s %s", flag, vip))
	if err != nil {
		return nil, err
	}
	return ParseIPVSTable(out)[proto+" "+vip], nil
}

// RealServers returns the real servers of a virtual server as "ip:port
// forward" (sorted), whatever their weight.
func (n *Node) RealServers(ctx context.Context, proto, vip string) ([]string, error) {
	rs, err := n.VirtualServer(ctx, proto, vip)
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(rs))
	for _, r := range rs {
		f := strings.Fields(r)
		out = append(out, f[0]+" "+f[1])
	}
	return out, nil
}
