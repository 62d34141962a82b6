package framework

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// The two-node testbed: a second node and an outside network inside the one
// VM, as network namespaces (vm/guest/twonode.sh draws the picture). IPVS,
// ipsets, iptables, the dummy device, the net.* sysctls and conntrack tables
// are per network namespace, so node2 runs a second instance of the same
// bin/kube-proxy with its own config, hostnameOverride and healthz/metrics
// ports. What is NOT per namespace (measured in the VM, see
// test/e2e/README.md): net.netfilter.nf_conntrack_max and the conntrack hash
// size (read-only outside the initial namespace: both configs set
// conntrack.maxPerCore 0), loaded modules, and the xtables lock file
// /run/xtables.lock (the two daemons' iptables-restore calls serialise on it,
// as two processes on one host do).
const (
	Node2Name = "kpi-node2"
	// Underlay addresses.
	Node1UnderlayIP = "192.168.200.11"
	Node2UnderlayIP = "192.168.200.12"
	// OutsideIP and OutsideOtherIP are the outside network's two client
	// addresses (one inside a loadBalancerSourceRanges range, one outside).
	OutsideIP      = "192.168.200.100"
	OutsideOtherIP = "192.168.200.200"
	// OutsideNS is the outside network's namespace in the VM.
	OutsideNS = "outside"

	node2NS          = "node2"
	node2APIServer   = "127.0.0.1:6443"
	apiserverRelay   = "/run/kpi-apiserver.sock"
	node2HealthzPort = 10356
	node2MetricsPort = 10349
)

// ClusterNode is one node of the two-node testbed: node1 is the VM's root
// namespace (the single-node suite's Node), node2 the namespace node2.
type ClusterNode struct {
	Name        string // Node object name
	NS          string // network namespace in the VM, "" = root
	IP          string // underlay address (reachable from outside)
	PodPrefix   string // "10.244.0." / "10.244.1."
	Gateway     string // cbr0's address, the pods' default route
	Zone        string
	HealthzPort int
	MetricsPort int

	vm       *VM
	base     *Node // node1: the suite's Node (its kube-proxy process)
	proxyPID int
	logPath  string
	dir      string // config folder in the VM
}

// TwoNode is the whole testbed.
type TwoNode struct {
	VM    *VM
	Nodes [2]*ClusterNode
}

// SetupTwoNode builds the underlay, node2 and the outside network in the VM,
// bridges node2 to the apiserver, registers Node kpi-node2 (InternalIP
// 192.168.200.12, zone-b, podCIDR 10.244.1.0/24) and starts both daemons
// (node1's through the suite's Node if it is not running yet).
func SetupTwoNode(ctx context.Context, vm *VM, cp *ControlPlane, node1 *Node, logf Logf) (*TwoNode, error) {
	start := time.Now()
	if _, err := vm.Sh(ctx, "bash /kpi/scripts/twonode.sh setup"); err != nil {
		return nil, fmt.Errorf("building the two-node network: %w", err)
	}
	// node2 reaches the apiserver the way node1 does, through the qemu
	// guestfwd 10.0.2.100:6443, which only the root namespace can reach: a
	// relay in the root namespace listens on a UNIX socket (paths cross
	// network namespaces) and one in node2 listens on 127.0.0.1:6443 (the
	// serving certificate names 127.0.0.1).
	if _, err := vm.Start(ctx, "/tmp/relay-root.log", "/kpi/bin/e2e-agent", "relay",
		"--listen", "unix:"+apiserverRelay, "--to", "tcp:"+VMAPIServerAddress); err != nil {
		return nil, err
	}
	if _, err := vm.Start(ctx, "/tmp/relay-node2.log", "ip", "netns", "exec", node2NS, "/kpi/bin/e2e-agent", "relay",
		"--listen", "tcp:"+node2APIServer, "--to", "unix:"+apiserverRelay); err != nil {
		return nil, err
	}
	tn := &TwoNode{VM: vm}
	tn.Nodes[0] = &ClusterNode{Name: NodeName, IP: Node1UnderlayIP, PodPrefix: "10.244.0.", Gateway: "10.244.0.1",
		HealthzPort: 10256, MetricsPort: 10249, vm: vm, base: node1, logPath: node1.ProxyLogPath, dir: "/kpi/kube-proxy"}
	tn.Nodes[1] = &ClusterNode{Name: Node2Name, NS: node2NS, IP: Node2UnderlayIP, PodPrefix: "10.244.1.", Gateway: "10.244.1.1",
		Zone: "zone-b", HealthzPort: node2HealthzPort, MetricsPort: node2MetricsPort, vm: vm,
		logPath: "/tmp/kube-proxy-node2.log", dir: "/kpi/node2"}
	if err := CreateNodeObject(ctx, cp.Client, Node2Name, Node2UnderlayIP, "10.244.1.0/24", "zone-b"); err != nil {
		return nil, err
	}
	// The relays must carry a request before node2's daemon relies on them.
	err := Eventually(ctx, 30*time.Second, 500*time.Millisecond, func(ctx context.Context) error {
		// A TLS handshake with the apiserver through both relays: the
		// certificate is not trusted by e2e-agent get, which is the proof.
		r, err := tn.Nodes[1].Exec(ctx, "/kpi/bin/e2e-agent", "get", "--url", "https://"+node2APIServer+"/readyz")
		if err != nil {
			return err
		}
		if out := r.Stdout + r.Stderr; !strings.Contains(out, "certificate") {
			return fmt.Errorf("https://%s from node2: %s", node2APIServer, out)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("node2 cannot reach the apiserver relay: %w", err)
	}
	for _, n := range tn.Nodes {
		if n.KubeProxyRunning(ctx) {
			continue
		}
		if err := n.StartKubeProxy(ctx, cp, ""); err != nil {
			return nil, err
		}
		if err := n.WaitKubeProxyReady(ctx, 120*time.Second); err != nil {
			return nil, fmt.Errorf("%s: %w", n.Name, err)
		}
	}
	logf("two-node testbed ready in %s (node2 in namespace %s, outside in %s)", time.Since(start).Round(time.Second), node2NS, OutsideNS)
	return tn, nil
}

// CreateNodeObject registers a Node as a kubelet would: hostname and zone
// labels, spec.podCIDR, InternalIP and Ready.
func CreateNodeObject(ctx context.Context, c kubernetes.Interface, name, ip, podCIDR, zone string) error {
	labels := map[string]string{"kubernetes.io/hostname": name}
	if zone != "" {
		labels["topology.kubernetes.io/zone"] = zone
	}
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec:       corev1.NodeSpec{PodCIDR: podCIDR, PodCIDRs: []string{podCIDR}},
	}
	created, err := c.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		created, err = c.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	}
	if err != nil {
		return fmt.Errorf("creating Node %s: %w", name, err)
	}
	created.Status.Addresses = []corev1.NodeAddress{
		{Type: corev1.NodeInternalIP, Address: ip},
		{Type: corev1.NodeHostName, Address: name},
	}
	created.Status.Conditions = []corev1.NodeCondition{{
		Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "E2E",
		LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now(),
	}}
	if _, err := c.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("setting the status of Node %s: %w", name, err)
	}
	return nil
}

// Other returns the other node.
func (tn *TwoNode) Other(n *ClusterNode) *ClusterNode {
	if n == tn.Nodes[0] {
		return tn.Nodes[1]
	}
	return tn.Nodes[0]
}

// RouteFromOutside routes dst (an externalIP or LoadBalancer IP, or a CIDR)
// from the outside network to node n, as an L2 or BGP load balancer would.
func (tn *TwoNode) RouteFromOutside(ctx context.Context, dst string, n *ClusterNode) error {
	_, err := tn.VM.Sh(ctx, fmt.Sprintf("bash /kpi/scripts/twonode.sh route %s %s", dst, n.IP))
	return err
}

// OutsideClient runs `e2e-agent client` in the outside network from source
// (OutsideIP, OutsideOtherIP, or "IP:PORT"; "" = the primary address).
func (tn *TwoNode) OutsideClient(ctx context.Context, source, proto, addr string, count int) (string, error) {
	argv := []string{"ip", "netns", "exec", OutsideNS, "/kpi/bin/e2e-agent", "client", "--proto", proto, "--addr", addr,
		"--count", strconv.Itoa(count), "--timeout", "2s"}
	if source != "" {
		argv = append(argv, "--source", source)
	}
	r, err := tn.VM.Exec(ctx, argv...)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(r.Stdout), nil
}

// OutsideGet fetches url from the outside network: status code and body
// (code 0 when the request failed).
func (tn *TwoNode) OutsideGet(ctx context.Context, url string) (int, string, error) {
	r, err := tn.VM.Exec(ctx, "ip", "netns", "exec", OutsideNS, "/kpi/bin/e2e-agent", "get", "--url", url, "--timeout", "3s")
	if err != nil {
		return 0, "", err
	}
	if r.ExitCode != 0 {
		return 0, strings.TrimSpace(r.Stdout + r.Stderr), nil
	}
	status, body, _ := strings.Cut(r.Stdout, "\n")
	var code int
	if _, err := fmt.Sscanf(status, "STATUS %d", &code); err != nil {
		return 0, "", fmt.Errorf("get %s: unexpected output %q", url, r.Stdout)
	}
	return code, strings.TrimSpace(body), nil
}

// KernelState dumps both nodes' state for a failure report.
func (tn *TwoNode) KernelState(ctx context.Context) string {
	var b strings.Builder
	for _, n := range tn.Nodes {
		fmt.Fprintf(&b, "=== %s (namespace %q) ===\n%s\n", n.Name, n.NS, n.KernelState(ctx))
	}
	out, _ := tn.VM.Sh(ctx, "ip -n outside route; ip route; ip -n node2 route")
	b.WriteString("=== routes (outside, node1, node2) ===\n" + out)
	return b.String()
}

// in prefixes argv so it runs in the node's namespace.
func (n *ClusterNode) in(argv ...string) []string {
	if n.NS == "" {
		return argv
	}
	return append([]string{"ip", "netns", "exec", n.NS}, argv...)
}

// Exec runs argv in the node's namespace.
func (n *ClusterNode) Exec(ctx context.Context, argv ...string) (Result, error) {
	return n.vm.Exec(ctx, n.in(argv...)...)
}

// Sh runs a bash script in the node's namespace (see VM.Sh).
func (n *ClusterNode) Sh(ctx context.Context, script string) (string, error) {
	r, err := n.Exec(ctx, "bash", "-c", script)
	if err != nil {
		return r.Stdout, err
	}
	if r.ExitCode != 0 {
		return r.Stdout, fmt.Errorf("%s: script exited %d: %s\nstderr: %s", n.Name, r.ExitCode, script, strings.TrimSpace(r.Stderr))
	}
	return r.Stdout, nil
}

// AddPod creates a pod (a namespace on this node's cbr0) at PodPrefix+host
// running the e2e-agent server on 8080, and waits until the node reaches it.
func (n *ClusterNode) AddPod(ctx context.Context, name string, host int) (*Pod, error) {
	ip := n.PodPrefix + strconv.Itoa(host)
	ns := n.NS
	if ns == "" {
		ns = "-"
	}
	if _, err := n.vm.Sh(ctx, fmt.Sprintf("bash /kpi/scripts/twonode.sh pod-add %s %s %s %s", ns, name, ip, n.Gateway)); err != nil {
		return nil, fmt.Errorf("creating pod %s on %s: %w", name, n.Name, err)
	}
	pid, err := n.vm.Start(ctx, "/tmp/pod-"+name+".log", "ip", "netns", "exec", name,
		"/kpi/bin/e2e-agent", "serve", "--name", name, "--port", "8080")
	if err != nil {
		return nil, err
	}
	p := &Pod{Name: name, IP: ip, pid: pid}
	err = Eventually(ctx, 30*time.Second, 300*time.Millisecond, func(ctx context.Context) error {
		out, err := n.Client(ctx, "", "tcp", ip+":8080", 1)
		if err != nil {
			return err
		}
		if !strings.HasPrefix(out, name+" ") {
			return fmt.Errorf("pod %s answered %q", name, out)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("pod %s (%s) on %s not answering: %w", name, ip, n.Name, err)
	}
	return p, nil
}

// DeletePod kills a pod's server and removes its namespace (and veth).
func (n *ClusterNode) DeletePod(ctx context.Context, p *Pod) error {
	_ = n.vm.Signal(ctx, p.pid, syscall.SIGKILL)
	_, err := n.vm.Sh(ctx, "bash /kpi/scripts/twonode.sh pod-del "+p.Name)
	return err
}

// Client runs `e2e-agent client` from pod namespace pod, or from the node
// itself when pod is ""; extra flags (--source ...) are appended.
func (n *ClusterNode) Client(ctx context.Context, pod, proto, addr string, count int, extra ...string) (string, error) {
	argv := append([]string{"/kpi/bin/e2e-agent", "client", "--proto", proto, "--addr", addr, "--count", strconv.Itoa(count), "--timeout", "2s"}, extra...)
	if pod != "" {
		argv = append([]string{"ip", "netns", "exec", pod}, argv...)
	} else {
		argv = n.in(argv...)
	}
	r, err := n.vm.Exec(ctx, argv...)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(r.Stdout), nil
}

// Config is the KubeProxyConfiguration of this node's daemon; extra is
// appended verbatim.
func (n *ClusterNode) Config(extra string) string {
	if n.base != nil {
		return KubeProxyConfig(extra)
	}
	return fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: ipvs
clientConnection:
  kubeconfig: %s/kubeconfig
hostnameOverride: %s
clusterCIDR: 10.244.0.0/16
metricsBindAddress: 127.0.0.1:%d
healthzBindAddress: 0.0.0.0:%d
conntrack:
  maxPerCore: 0
ipvs:
  scheduler: rr
  syncPeriod: 10s
  minSyncPeriod: 0s
`, n.dir, n.Name, n.MetricsPort, n.HealthzPort) + extra
}

// StartKubeProxy starts this node's daemon with Config(extra) and more
// command-line flags.
func (n *ClusterNode) StartKubeProxy(ctx context.Context, cp *ControlPlane, extra string, flags ...string) error {
	if n.base != nil {
		return n.base.StartKubeProxy(ctx, cp, n.Config(extra), flags...)
	}
	kubeconfig := strings.Replace(string(cp.ProxyKubeconfig()), "https://"+VMAPIServerAddress, "https://"+node2APIServer, 1)
	if err := n.vm.WriteFile(ctx, n.dir+"/kubeconfig", []byte(kubeconfig), 0o600); err != nil {
		return err
	}
	if err := n.vm.WriteFile(ctx, n.dir+"/config.yaml", []byte(n.Config(extra)), 0o644); err != nil {
		return err
	}
	pid, err := n.vm.Start(ctx, n.logPath, n.in(n.vm.KubeProxyCommand(append([]string{
		"--config=" + n.dir + "/config.yaml", "--kubeconfig=" + n.dir + "/kubeconfig", "--v=2"}, withBackend(flags)...)...)...)...)
	if err != nil {
		return fmt.Errorf("starting kube-proxy on %s: %w", n.Name, err)
	}
	n.proxyPID = pid
	return nil
}

// PID is the daemon's process id in the VM (0 when not running).
func (n *ClusterNode) PID() int {
	if n.base != nil {
		return n.base.proxyPID
	}
	return n.proxyPID
}

// KubeProxyRunning reports whether this node's daemon is alive.
func (n *ClusterNode) KubeProxyRunning(ctx context.Context) bool {
	if n.base != nil {
		return n.base.KubeProxyRunning(ctx)
	}
	if n.proxyPID == 0 {
		return false
	}
	r, err := n.vm.Exec(ctx, "bash", "-c", fmt.Sprintf("test -d /proc/%d && ! grep -q '^State:.*Z' /proc/%d/status", n.proxyPID, n.proxyPID))
	return err == nil && r.ExitCode == 0
}

// StopKubeProxy sends SIGTERM and waits for the daemon to exit.
func (n *ClusterNode) StopKubeProxy(ctx context.Context) error {
	if n.base != nil {
		return n.base.StopKubeProxy(ctx)
	}
	if n.proxyPID == 0 || !n.KubeProxyRunning(ctx) {
		n.proxyPID = 0
		return nil
	}
	if err := n.vm.Signal(ctx, n.proxyPID, syscall.SIGTERM); err != nil {
		return err
	}
	err := Eventually(ctx, 20*time.Second, 500*time.Millisecond, func(ctx context.Context) error {
		if n.KubeProxyRunning(ctx) {
			return fmt.Errorf("kube-proxy on %s (pid %d) still running", n.Name, n.proxyPID)
		}
		return nil
	})
	n.proxyPID = 0
	return err
}

// KubeProxyLog is the tail of this node's daemon log.
func (n *ClusterNode) KubeProxyLog(ctx context.Context, lines int) string {
	out, _ := n.vm.Sh(ctx, fmt.Sprintf("tail -n %d %s 2>&1", lines, n.logPath))
	return out
}

// WaitKubeProxyReady waits for kube-ipvs0 and the services chain of either
// rules backend in the node's namespace.
func (n *ClusterNode) WaitKubeProxyReady(ctx context.Context, timeout time.Duration) error {
	err := Eventually(ctx, timeout, time.Second, func(ctx context.Context) error {
		if !n.KubeProxyRunning(ctx) {
			return StopTrying(fmt.Errorf("kube-proxy on %s exited", n.Name))
		}
		if _, err := n.Sh(ctx, rulesReadyScript); err != nil {
			return fmt.Errorf("kube-ipvs0 or the services chain not there yet on %s", n.Name)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("%w\nkube-proxy log tail (%s):\n%s", err, n.Name, n.KubeProxyLog(ctx, 40))
	}
	return nil
}

// KernelState dumps IPVS, kube-ipvs0, ipsets and iptables of this node.
func (n *ClusterNode) KernelState(ctx context.Context) string {
	out, _ := n.Sh(ctx, `echo '# ipvsadm -Ln'; ipvsadm -Ln 2>&1; echo '# ip addr show kube-ipvs0'; ip addr show kube-ipvs0 2>&1;
echo '# ipset list -t'; ipset list -t 2>&1 | head -80; echo '# iptables-save'; iptables-save 2>&1 | head -150
`+nftTableDump)
	return out
}

// VirtualServer returns the real servers of one virtual server on this node
// as "ip:port forward weight" (see Node.VirtualServer).
func (n *ClusterNode) VirtualServer(ctx context.Context, proto, vip string) ([]string, error) {
	flag := map[string]string{"TCP": "-t", "UDP": "-u", "SCTP": "--sctp-service"}[proto]
	out, err := n.Sh(ctx, fmt.Sprintf("ipvsadm -Ln %s %s", flag, vip))
	if err != nil {
		return nil, err
	}
	return ParseIPVSTable(out)[proto+" "+vip], nil
}

// ActiveRealServers returns the "ip:port" of vip's real servers with a
// weight above zero, sorted.
func (n *ClusterNode) ActiveRealServers(ctx context.Context, proto, vip string) ([]string, error) {
	rs, err := n.VirtualServer(ctx, proto, vip)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, r := range rs {
		if f := strings.Fields(r); len(f) >= 3 && f[2] != "0" {
			out = append(out, f[0])
		}
	}
	return out, nil
}

// Metrics returns the daemon's /metrics page.
func (n *ClusterNode) Metrics(ctx context.Context) (string, error) {
	return n.Sh(ctx, fmt.Sprintf("timeout 10 wget -q -O - http://127.0.0.1:%d/metrics", n.MetricsPort))
}

// Healthz returns the daemon's /healthz status code and body.
func (n *ClusterNode) Healthz(ctx context.Context) (int, string, error) {
	r, err := n.Exec(ctx, "/kpi/bin/e2e-agent", "get", "--url", fmt.Sprintf("http://127.0.0.1:%d/healthz", n.HealthzPort))
	if err != nil {
		return 0, "", err
	}
	status, body, _ := strings.Cut(r.Stdout, "\n")
	var code int
	_, _ = fmt.Sscanf(status, "STATUS %d", &code)
	return code, strings.TrimSpace(body), nil
}
