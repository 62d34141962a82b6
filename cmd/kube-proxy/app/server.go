package app

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	clientset "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	"k8s.io/component-base/featuregate"
	"k8s.io/klog/v2"
	"k8s.io/kube-proxy/config/v1alpha1"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy"
	proxyconfigapi "github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/apis/config"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/healthcheck"
	ipvsproxy "github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/ipvs"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/metrics"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/sysctl"
)

// ProxyServer is everything the proxier and the run loop need. The proxier
// (createProxier) reads its settings from Config and the node facts below.
type ProxyServer struct {
	// Config is the validated, defaulted effective configuration.
	Config *v1alpha1.KubeProxyConfiguration
	// FeatureGate is the effective feature gate.
	FeatureGate featuregate.FeatureGate

	Client      clientset.Interface
	Broadcaster events.EventBroadcaster
	Recorder    events.EventRecorder
	// NodeRef is the object events about this kube-proxy are recorded on.
	NodeRef *v1.ObjectReference

	// NodeName is --hostname-override / hostnameOverride, else the hostname,
	// lowercased.
	NodeName string
	// Node is the Node object as fetched at start-up (nil when it could not be).
	Node *v1.Node

	// The node facts below are those the current proxier was built from; a rebuild
	// (generation.go) replaces them. Only the goroutine of Run changes them.
	facts nodeFacts
	// PrimaryIPFamily is the family of the node's first IP (or of a specific
	// bindAddress).
	PrimaryIPFamily v1.IPFamily
	// NodeIPs has the node's first IP of each family it has (InternalIP before
	// ExternalIP); a specific bindAddress replaces its family's entry.
	NodeIPs map[v1.IPFamily]net.IP
	// IPFamilies are the families to run a proxier for: PrimaryIPFamily first,
	// then the other one if the kernel supports it (upstream's dual-stack rule).
	IPFamilies []v1.IPFamily
	// PodCIDRs is node.spec.podCIDRs (for detectLocalMode NodeCIDR).
	PodCIDRs []string
	// NodePortAddresses is nodePortAddresses with the keywords expanded to
	// CIDRs ('primary' -> the NodeIPs as /32 and /128, 'localhost', 'all').
	// Empty means every local address.
	NodePortAddresses []string

	// HealthzServer serves /healthz and /livez; nil when healthzBindAddress is "".
	// The proxier calls QueuedUpdate/Updated per family on it.
	HealthzServer *healthcheck.ProxyHealthServer

	// Sysctl is the /proc/sys accessor the proxier should use too.
	Sysctl sysctl.Interface

	// Proxier is created by createProxier after the kernel set-up.
	Proxier proxy.Provider
	// HeldBack lists what the proxiers are not programming, for the metrics server's
	// debug endpoint; set by createProxier.
	HeldBack func() any
	// Explain explains one Service for the metrics server's explain endpoint; nil
	// when the provider cannot.
	Explain metrics.Explainer
	// virtualServerStats reads the per-Service IPVS counters of the proxiers
	// (--ipvs-virtual-server-metrics); set by createProxier.
	virtualServerStats func() []metrics.VirtualServerStats
	// releaseProxier closes what the proxiers opened beside the kernel state (the
	// health check node ports) once they are stopped; set by createProxier.
	releaseProxier func()
	// handles are the tools and kernel sockets every proxier of the process shares
	// (opened by the first createProxier).
	handles *proxierHandles

	// built is the proxier generation newProxyServer built, which Run starts;
	// live is the running one, for the servers' readers.
	built *proxierGeneration
	// early are the Service and EndpointSlice lists started as soon as the client
	// exists, for the first generation to take (startLists).
	early *lists
	live  *liveGeneration

	// ConfigFile is --config; the daemon exits when its content changes.
	ConfigFile string
	// VirtualServerMetrics enables the per-Service IPVS counters.
	VirtualServerMetrics bool
	// WarmStart is --ipvs-warm-start.
	WarmStart bool
	// RulesBackend is --ipvs-rules-backend (ipvsproxy.RulesBackend*).
	RulesBackend string
	// Flags is the parsed command line, which /flagz shows; nil in tests.
	Flags *pflag.FlagSet

	deps deps
}

// deps are the process-level collaborators, swapped in tests.
type deps struct {
	newClient       func(ctx context.Context, cfg *v1alpha1.KubeProxyConfiguration, master string) (clientset.Interface, error)
	hostname        func() (string, error)
	kernel          kernelSetup
	familySupported func(v1.IPFamily) error // nil: a proxier can run for it
	// nftFamilySupported replaces familySupported with the nftables rules backend
	// (no iptables nat table needed); nil: familySupported decides.
	nftFamilySupported func(v1.IPFamily) error
	nodeWaitTimeout    time.Duration // for the Node, its addresses and (NodeCIDR) podCIDRs
	nodePoll           time.Duration
	newProvider        func(ctx context.Context, s *ProxyServer) (proxy.Provider, error)
	configPoll         time.Duration
	serverRetry        time.Duration
	rebuildRetry       time.Duration // after a proxier rebuild failed
}

func defaultDeps() deps {
	return deps{
		newClient:          createClient,
		hostname:           os.Hostname,
		kernel:             defaultKernelSetup(),
		familySupported:    defaultFamilyCheck().usable,
		nftFamilySupported: familyCheck{procRoot: "/proc"}.usable,
		nodeWaitTimeout:    30 * time.Second,
		nodePoll:           time.Second,
		newProvider:        createProxier,
		configPoll:         5 * time.Second,
		serverRetry:        5 * time.Second,
		rebuildRetry:       30 * time.Second,
	}
}

// kernelSupportsFamily reports whether the kernel has the IP family enabled.
func kernelSupportsFamily(family v1.IPFamily) bool {
	if family == v1.IPv4Protocol {
		return true
	}
	_, err := os.Stat("/proc/net/if_inet6")
	return err == nil
}

// newProxyServer resolves the node, builds the client and recorder, sets up the
// kernel and creates the proxier.
func newProxyServer(ctx context.Context, o *Options, d deps) (*ProxyServer, error) {
	logger := klog.FromContext(ctx)
	cfg := o.config
	s := &ProxyServer{Config: cfg, FeatureGate: o.featureGate, Sysctl: d.kernel.sysctl, ConfigFile: o.ConfigFile, VirtualServerMetrics: o.VirtualServerMetrics,
		WarmStart: o.WarmStart, RulesBackend: o.RulesBackend, Flags: o.flags, deps: d}

	name, err := resolveNodeName(cfg.HostnameOverride, d.hostname)
	if err != nil {
		return nil, err
	}
	s.NodeName = name

	if s.Client, err = d.newClient(ctx, cfg, o.Master); err != nil {
		return nil, err
	}
	// The lists start now: at scale the API server's lists take seconds, which the
	// Node wait, the kernel set-up and building the proxier (tool checks, kernel
	// reads) would otherwise add to the time before the first sync.
	selector, err := serviceLabelSelector()
	if err != nil {
		return nil, err
	}
	s.early = startLists(ctx, s, selector)
	defer func() {
		if s.built == nil && s.early != nil {
			s.early.stop()
			s.early = nil
		}
	}()

	nodeCIDR := cfg.DetectLocalMode == "NodeCIDR"
	if s.Node, err = waitForNode(ctx, s.Client, s.NodeName, d, nodeCIDR); err != nil {
		return nil, err
	}
	facts := startNodeFacts(s.Node, cfg.BindAddress)
	if facts.ipsAssumed {
		logger.Info("Can't determine this node's IP, assuming 127.0.0.1; if this is incorrect, please set the --bind-address flag")
	}
	if !facts.complete(nodeCIDR) {
		logger.Info("Starting with assumed node values; the proxier is rebuilt with the Node's once the node watch reads it", facts.logValues(nodeCIDR)...)
	}
	s.setNodeFacts(logger, facts)
	if len(cfg.NodePortAddresses) == 0 {
		logger.Info("nodePortAddresses is unset; NodePort connections will be accepted on all local IPs. Consider using `--nodeport-addresses primary`")
	}

	s.Broadcaster = events.NewBroadcaster(&events.EventSinkImpl{Interface: s.Client.EventsV1()})
	s.Recorder = s.Broadcaster.NewRecorder(scheme.Scheme, componentName)
	s.NodeRef = &v1.ObjectReference{Kind: "Node", Name: s.NodeName, UID: types.UID(s.NodeName)}

	if cfg.HealthzBindAddress != "" {
		s.HealthzServer = healthcheck.NewProxyHealthServer(cfg.HealthzBindAddress, 2*cfg.IPVS.SyncPeriod.Duration)
	}

	if err := s.setupKernel(ctx); err != nil {
		return nil, err
	}
	if s.built, err = buildGeneration(ctx, s); err != nil {
		return nil, fmt.Errorf("creating the ipvs proxier: %w", err)
	}
	s.live = &liveGeneration{}
	s.live.gen.Store(s.built)
	if s.VirtualServerMetrics {
		// Registered once: the counters are read from whichever proxier runs.
		if err := metrics.RegisterVirtualServerStats(s.live.virtualServerStats); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// setNodeFacts sets what the proxier is built from: the facts and what follows
// from them (the families to run a proxier for, nodePortAddresses expanded).
func (s *ProxyServer) setNodeFacts(logger klog.Logger, f nodeFacts) {
	s.facts = f
	s.PrimaryIPFamily, s.NodeIPs, s.PodCIDRs = f.primary, f.ips, f.podCIDRs
	s.IPFamilies = []v1.IPFamily{s.PrimaryIPFamily}
	other := otherFamily(s.PrimaryIPFamily)
	supported := s.deps.familySupported
	if s.RulesBackend == ipvsproxy.RulesBackendNFTables && s.deps.nftFamilySupported != nil {
		supported = s.deps.nftFamilySupported
	}
	if err := supported(other); err == nil {
		s.IPFamilies = append(s.IPFamilies, other)
		logger.Info("Running in dual-stack mode", "primaryIPFamily", s.PrimaryIPFamily)
	} else {
		// One line says both the decision and why (upstream logs "No iptables
		// support for family" and runs single-stack the same way).
		logger.Info("Running in single-stack mode", "ipFamily", s.PrimaryIPFamily, "unusableFamily", other, "reason", err.Error())
	}
	s.NodePortAddresses = expandNodePortAddresses(s.Config.NodePortAddresses, s.NodeIPs)
}

// setupKernel applies the OOM score and conntrack sysctls (also what --init-only
// does).
func (s *ProxyServer) setupKernel(ctx context.Context) error {
	k := s.deps.kernel
	if k.sysctl == nil {
		k = defaultKernelSetup()
	}
	if err := k.apply(ctx, s.Config); err != nil {
		return fmt.Errorf("setting up conntrack: %w", err)
	}
	return nil
}

func resolveNodeName(override string, hostname func() (string, error)) (string, error) {
	name := override
	if name == "" {
		h, err := hostname()
		if err != nil {
			return "", fmt.Errorf("determining the node name from the hostname: %w", err)
		}
		name = h
	}
	name = strings.ToLower(strings.TrimSpace(name))
	if name == "" {
		return "", fmt.Errorf("empty node name: set --hostname-override")
	}
	return name, nil
}

// waitForNode waits, as upstream does, up to nodeWaitTimeout for the Node to exist
// and have an address and, in detectLocalMode NodeCIDR, spec.podCIDRs. It fails only
// when ctx ends: what the Node does not tell by then is assumed (nodeFacts) and
// learnt later by the node watch, so the daemon starts, serves its health and
// metrics, and never exits because the control plane is unreachable (upstream exits
// after 5 more minutes without podCIDRs, and never learns the node IPs it assumed).
// It returns the last Node seen, possibly nil.
func waitForNode(ctx context.Context, client clientset.Interface, name string, d deps, needPodCIDRs bool) (*v1.Node, error) {
	logger := klog.FromContext(ctx)
	var node *v1.Node
	var lastErr error
	complete := func(n *v1.Node) bool {
		_, _, hasIP := nodeIPsOf(n, "")
		return hasIP && (!needPodCIDRs || len(n.Spec.PodCIDRs) > 0)
	}
	err := wait.PollUntilContextTimeout(ctx, d.nodePoll, d.nodeWaitTimeout, true, func(ctx context.Context) (bool, error) {
		n, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			lastErr = err
			return false, nil
		}
		node, lastErr = n, nil
		return complete(n), nil
	})
	if err == nil {
		return node, nil
	}
	if ctx.Err() != nil {
		return nil, fmt.Errorf("waiting for node %q: %w", name, ctx.Err())
	}
	_, _, hasIP := nodeIPsOf(node, "")
	switch {
	case node == nil && apierrors.IsNotFound(lastErr):
		logger.Error(nil, "Timed out waiting for node to exist; is --hostname-override (or the hostname) the Node's name?", "node", klog.KRef("", name), "waited", d.nodeWaitTimeout)
	case node == nil:
		logger.Error(lastErr, "Timed out waiting for node", "node", klog.KRef("", name), "waited", d.nodeWaitTimeout)
	case !hasIP:
		logger.Error(nil, "Timed out waiting for node to be assigned IPs", "node", klog.KRef("", name), "waited", d.nodeWaitTimeout)
	default:
		logger.Error(nil, "Timed out waiting for node to be assigned spec.podCIDRs (detectLocalMode NodeCIDR)", "node", klog.KRef("", name), "waited", d.nodeWaitTimeout)
	}
	return node, nil
}

// nodeIPsOf picks the node's IPs the way upstream does: the first InternalIP of
// each family, else the first ExternalIP; the first address found sets the primary
// family. A specific bindAddress overrides its family and becomes primary. ok is
// false when there is no address at all (node nil, or without one).
func nodeIPsOf(node *v1.Node, bindAddress string) (primary v1.IPFamily, ips map[v1.IPFamily]net.IP, ok bool) {
	ips = map[v1.IPFamily]net.IP{}
	var addrs []v1.NodeAddress
	if node != nil {
		addrs = node.Status.Addresses
	}
	for _, addrType := range []v1.NodeAddressType{v1.NodeInternalIP, v1.NodeExternalIP} {
		for _, a := range addrs {
			if a.Type != addrType {
				continue
			}
			ip := net.ParseIP(a.Address)
			if ip == nil {
				continue
			}
			fam := familyOf(ip)
			if _, seen := ips[fam]; seen {
				continue
			}
			ips[fam] = ip
			if primary == "" {
				primary = fam
			}
		}
	}
	if bind := net.ParseIP(bindAddress); bind != nil && !bind.IsUnspecified() {
		fam := familyOf(bind)
		ips[fam] = bind
		primary = fam
	}
	return primary, ips, primary != ""
}

func familyOf(ip net.IP) v1.IPFamily {
	if ip.To4() != nil {
		return v1.IPv4Protocol
	}
	return v1.IPv6Protocol
}

func otherFamily(f v1.IPFamily) v1.IPFamily {
	if f == v1.IPv4Protocol {
		return v1.IPv6Protocol
	}
	return v1.IPv4Protocol
}

// expandNodePortAddresses turns the keywords of nodePortAddresses into CIDRs.
func expandNodePortAddresses(values []string, nodeIPs map[v1.IPFamily]net.IP) []string {
	var out []string
	seen := map[string]bool{}
	add := func(cidr string) {
		if !seen[cidr] {
			seen[cidr] = true
			out = append(out, cidr)
		}
	}
	for _, v := range values {
		switch v {
		case proxyconfigapi.NodePortAddressesPrimary:
			if ip := nodeIPs[v1.IPv4Protocol]; ip != nil && !ip.IsLoopback() {
				add(ip.String() + "/32")
			}
			if ip := nodeIPs[v1.IPv6Protocol]; ip != nil && !ip.IsLoopback() {
				add(ip.String() + "/128")
			}
		case proxyconfigapi.NodePortAddressesLocalhost:
			add("127.0.0.0/8")
			add("::1/128")
		case proxyconfigapi.NodePortAddressesAll:
			add("0.0.0.0/0")
			add("::/0")
		default:
			add(strings.TrimSpace(v))
		}
	}
	return out
}
