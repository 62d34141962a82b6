package app

// Test addresses: nodes use 10.0.0.0/24 and fd00::/64 (documentation-style
// private ranges that exist only in the fake apiserver); nothing is dialled
// except 127.0.0.1 listeners the tests open themselves.

import (
	"context"
	"errors"
	"fmt"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/ipvs"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/testing/netns"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientset "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/kube-proxy/config/v1alpha1"
	"k8s.io/utils/ptr"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy"
	proxyconfigapi "github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/apis/config"
	ipvsproxy "github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/ipvs"
)

// fakeSysctl is an in-memory /proc/sys.
type fakeSysctl struct {
	mu     sync.Mutex
	values map[string]int
	writes []string
}

func (f *fakeSysctl) GetSysctl(name string) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	v, ok := f.values[name]
	if !ok {
		return 0, os.ErrNotExist
	}
	return v, nil
}

func (f *fakeSysctl) SetSysctl(name string, value int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.values[name] = value
	f.writes = append(f.writes, fmt.Sprintf("%s=%d", name, value))
	return nil
}

func testKernel(t *testing.T, hashsize int) (kernelSetup, *fakeSysctl) {
	t.Helper()
	dir := t.TempDir()
	params := filepath.Join(dir, "sys", "module", "nf_conntrack", "parameters")
	if err := os.MkdirAll(params, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(params, "hashsize"), []byte(strconv.Itoa(hashsize)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	sc := &fakeSysctl{values: map[string]int{
		sysctlConntrackMax:          65536,
		sysctlTCPEstablishedTimeout: 432000,
		sysctlTCPCloseWaitTimeout:   60,
		sysctlTCPBeLiberal:          0,
		sysctlUDPTimeout:            30,
		sysctlUDPStreamTimeout:      120,
	}}
	return kernelSetup{
		sysctl:          sc,
		sysRoot:         filepath.Join(dir, "sys"),
		oomScoreAdjPath: filepath.Join(dir, "oom_score_adj"),
		numCPU:          func() int { return 8 },
	}, sc
}

func readTrim(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(data))
}

func TestKernelSetup(t *testing.T) {
	cases := []struct {
		name         string
		mutate       func(*v1alpha1.KubeProxyConfiguration)
		wantWrites   []string
		wantHashsize string
		wantOOM      string
	}{
		{
			name: "defaults on 8 cores",
			// max(32768*8, 131072) = 262144; hash size raised to max/4.
			wantWrites: []string{
				sysctlConntrackMax + "=262144",
				sysctlTCPEstablishedTimeout + "=86400",
				sysctlTCPCloseWaitTimeout + "=3600",
			},
			wantHashsize: "65536",
			wantOOM:      "-999",
		},
		{
			name: "min wins, udp timeouts and be-liberal set, oom 0 untouched",
			mutate: func(c *v1alpha1.KubeProxyConfiguration) {
				c.Conntrack.Min = ptr.To[int32](1 << 20)
				c.Conntrack.UDPTimeout.Duration = 45 * time.Second
				c.Conntrack.UDPStreamTimeout.Duration = 5 * time.Minute
				c.Conntrack.TCPBeLiberal = true
				c.OOMScoreAdj = ptr.To[int32](0)
			},
			wantWrites: []string{
				sysctlConntrackMax + "=1048576",
				sysctlTCPEstablishedTimeout + "=86400",
				sysctlTCPCloseWaitTimeout + "=3600",
				sysctlUDPTimeout + "=45",
				sysctlUDPStreamTimeout + "=300",
				sysctlTCPBeLiberal + "=1",
			},
			wantHashsize: "262144",
			wantOOM:      "untouched",
		},
		{
			name: "maxPerCore 0 and zero timeouts leave everything as is",
			mutate: func(c *v1alpha1.KubeProxyConfiguration) {
				c.Conntrack.MaxPerCore = ptr.To[int32](0)
				c.Conntrack.TCPEstablishedTimeout = &metav1.Duration{}
				c.Conntrack.TCPCloseWaitTimeout = &metav1.Duration{}
				c.OOMScoreAdj = ptr.To[int32](-500)
			},
			wantWrites:   nil,
			wantHashsize: "16384",
			wantOOM:      "-500",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			k, sc := testKernel(t, 16384)
			if err := os.WriteFile(k.oomScoreAdjPath, []byte("untouched"), 0o644); err != nil {
				t.Fatal(err)
			}
			cfg := proxyconfigapi.NewDefaultConfiguration()
			if tc.mutate != nil {
				tc.mutate(cfg)
			}
			if err := k.apply(context.Background(), cfg); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.wantWrites, sc.writes); diff != "" {
				t.Errorf("sysctl writes (-want +got):\n%s", diff)
			}
			if got := readTrim(t, filepath.Join(k.sysRoot, conntrackHashsizeParameterRel)); got != tc.wantHashsize {
				t.Errorf("hashsize %s, want %s", got, tc.wantHashsize)
			}
			if got := readTrim(t, k.oomScoreAdjPath); got != tc.wantOOM {
				t.Errorf("oom_score_adj %q, want %q", got, tc.wantOOM)
			}
			// A second run changes nothing: values are only written when they differ.
			sc.writes = nil
			if err := k.apply(context.Background(), cfg); err != nil {
				t.Fatal(err)
			}
			if len(sc.writes) != 0 {
				t.Errorf("second apply rewrote %v", sc.writes)
			}
		})
	}
}

func TestKernelSetupOOMFailureIsNotFatal(t *testing.T) {
	k, _ := testKernel(t, 1<<20)
	k.oomScoreAdjPath = filepath.Join(t.TempDir(), "missing-dir", "oom_score_adj")
	if err := k.apply(context.Background(), proxyconfigapi.NewDefaultConfiguration()); err != nil {
		t.Errorf("an unwritable OOM score must only be logged, got %v", err)
	}
}

func TestDetectNodeIPs(t *testing.T) {
	node := func(addrs ...string) *v1.Node {
		n := &v1.Node{}
		for _, a := range addrs {
			typ, ip, _ := strings.Cut(a, "=")
			n.Status.Addresses = append(n.Status.Addresses, v1.NodeAddress{Type: v1.NodeAddressType(typ), Address: ip})
		}
		return n
	}
	cases := []struct {
		name        string
		node        *v1.Node
		bind        string
		wantPrimary v1.IPFamily
		wantIPs     map[v1.IPFamily]string
	}{
		{"internal v4", node("Hostname=node-a", "InternalIP=10.0.0.5"), "0.0.0.0", v1.IPv4Protocol, map[v1.IPFamily]string{v1.IPv4Protocol: "10.0.0.5"}},
		{"dual, v6 first", node("InternalIP=fd00::5", "InternalIP=10.0.0.5", "InternalIP=10.0.0.6"), "0.0.0.0", v1.IPv6Protocol, map[v1.IPFamily]string{v1.IPv4Protocol: "10.0.0.5", v1.IPv6Protocol: "fd00::5"}},
		{"internal before external", node("ExternalIP=192.0.2.1", "InternalIP=10.0.0.5"), "0.0.0.0", v1.IPv4Protocol, map[v1.IPFamily]string{v1.IPv4Protocol: "10.0.0.5"}},
		{"external only", node("ExternalIP=192.0.2.1"), "::", v1.IPv4Protocol, map[v1.IPFamily]string{v1.IPv4Protocol: "192.0.2.1"}},
		{"bind address overrides", node("InternalIP=10.0.0.5"), "fd00::9", v1.IPv6Protocol, map[v1.IPFamily]string{v1.IPv4Protocol: "10.0.0.5", v1.IPv6Protocol: "fd00::9"}},
		{"no address: loopback", node("Hostname=node-a"), "0.0.0.0", v1.IPv4Protocol, map[v1.IPFamily]string{v1.IPv4Protocol: "127.0.0.1"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			facts := startNodeFacts(tc.node, tc.bind)
			primary := facts.primary
			got := map[v1.IPFamily]string{}
			for f, ip := range facts.ips {
				got[f] = ip.String()
			}
			if primary != tc.wantPrimary {
				t.Errorf("primary %s, want %s", primary, tc.wantPrimary)
			}
			if diff := cmp.Diff(tc.wantIPs, got); diff != "" {
				t.Errorf("node IPs (-want +got):\n%s", diff)
			}
		})
	}
}

func TestExpandNodePortAddresses(t *testing.T) {
	ips := map[v1.IPFamily]net.IP{v1.IPv4Protocol: net.ParseIP("10.0.0.5"), v1.IPv6Protocol: net.ParseIP("fd00::5")}
	got := expandNodePortAddresses([]string{"primary", "192.0.2.0/24", "localhost", "10.0.0.5/32"}, ips)
	want := []string{"10.0.0.5/32", "fd00::5/128", "192.0.2.0/24", "127.0.0.0/8", "::1/128"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if got := expandNodePortAddresses(nil, ips); got != nil {
		t.Errorf("unset stays unset (all local addresses), got %v", got)
	}
}

func TestServiceLabelSelector(t *testing.T) {
	sel, err := serviceLabelSelector()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := sel.String(), "!service.kubernetes.io/headless,!service.kubernetes.io/service-proxy-name"; got != want {
		t.Errorf("selector %q, want %q", got, want)
	}
}

// fakeProvider records what the informers deliver.
type fakeProvider struct {
	ctx      context.Context
	mu       sync.Mutex
	services map[string]bool
	slices   map[string]bool
	nodes    []string
	synced   map[string]bool
	looping  chan struct{}
}

func newFakeProvider(ctx context.Context) *fakeProvider {
	return &fakeProvider{ctx: ctx, services: map[string]bool{}, slices: map[string]bool{}, synced: map[string]bool{}, looping: make(chan struct{})}
}

func (p *fakeProvider) record(f func()) { p.mu.Lock(); defer p.mu.Unlock(); f() }
func (p *fakeProvider) OnServiceAdd(s *proxy.ServiceRecord) {
	p.record(func() { p.services[s.Namespace+"/"+s.Name] = true })
}
func (p *fakeProvider) OnServiceUpdate(_, s *proxy.ServiceRecord) { p.OnServiceAdd(s) }
func (p *fakeProvider) OnServiceDelete(s *proxy.ServiceRecord) {
	p.record(func() { delete(p.services, s.Namespace+"/"+s.Name) })
}
func (p *fakeProvider) OnServiceSynced() { p.record(func() { p.synced["services"] = true }) }
func (p *fakeProvider) OnEndpointSliceAdd(s *proxy.EndpointSliceRecord) {
	p.record(func() { p.slices[s.Namespace+"/"+s.Name] = true })
}
func (p *fakeProvider) OnEndpointSliceUpdate(_, s *proxy.EndpointSliceRecord) {
	p.OnEndpointSliceAdd(s)
}
func (p *fakeProvider) OnEndpointSliceDelete(s *proxy.EndpointSliceRecord) {
	p.record(func() { delete(p.slices, s.Namespace+"/"+s.Name) })
}
func (p *fakeProvider) OnEndpointSlicesSynced() { p.record(func() { p.synced["slices"] = true }) }
func (p *fakeProvider) OnNodeAdd(n *v1.Node) {
	p.record(func() { p.nodes = append(p.nodes, "add "+n.Name) })
}
func (p *fakeProvider) OnNodeUpdate(_, n *v1.Node) {
	p.record(func() { p.nodes = append(p.nodes, "update "+n.Name) })
}
func (p *fakeProvider) OnNodeDelete(n *v1.Node) {
	p.record(func() { p.nodes = append(p.nodes, "delete "+n.Name) })
}
func (p *fakeProvider) OnNodeSynced() { p.record(func() { p.synced["nodes"] = true }) }
func (p *fakeProvider) Sync()         {}
func (p *fakeProvider) SyncLoop() {
	close(p.looping)
	<-p.ctx.Done()
}

var _ proxy.Provider = &fakeProvider{}

type testEnv struct {
	client   *fake.Clientset
	provider *fakeProvider
	sysctl   *fakeSysctl
	deps     deps
}

func newTestEnv(t *testing.T, objects ...runtime.Object) *testEnv {
	t.Helper()
	env := &testEnv{client: fake.NewSimpleClientset(objects...)}
	k, sc := testKernel(t, 1<<20)
	env.sysctl = sc
	env.deps = deps{
		newClient: func(context.Context, *v1alpha1.KubeProxyConfiguration, string) (clientset.Interface, error) {
			return env.client, nil
		},
		hostname:        func() (string, error) { return "Node-A", nil },
		kernel:          k,
		familySupported: func(v1.IPFamily) error { return nil },
		nodeWaitTimeout: 2 * time.Second,
		nodePoll:        10 * time.Millisecond,
		newProvider: func(ctx context.Context, s *ProxyServer) (proxy.Provider, error) {
			env.provider = newFakeProvider(ctx)
			return env.provider, nil
		},
		configPoll:   20 * time.Millisecond,
		serverRetry:  20 * time.Millisecond,
		rebuildRetry: 50 * time.Millisecond,
	}
	return env
}

func testNode() *v1.Node {
	return &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "node-a"},
		Spec:       v1.NodeSpec{PodCIDRs: []string{"10.244.1.0/24", "fd00:244:1::/64"}},
		Status: v1.NodeStatus{Addresses: []v1.NodeAddress{
			{Type: v1.NodeInternalIP, Address: "10.0.0.5"},
			{Type: v1.NodeInternalIP, Address: "fd00::5"},
		}},
	}
}

func testOptions(t *testing.T, mutate func(*v1alpha1.KubeProxyConfiguration)) *Options {
	t.Helper()
	cfg := proxyconfigapi.NewDefaultConfiguration()
	cfg.MetricsBindAddress = "127.0.0.1:0"
	cfg.HealthzBindAddress = "127.0.0.1:0"
	if mutate != nil {
		mutate(cfg)
	}
	return newOptions(cfg, newFeatureGate())
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestNewProxyServer(t *testing.T) {
	env := newTestEnv(t, testNode())
	o := testOptions(t, func(c *v1alpha1.KubeProxyConfiguration) {
		c.NodePortAddresses = []string{"primary"}
		c.IPVS.SyncPeriod.Duration = 7 * time.Second
	})
	s, err := newProxyServer(context.Background(), o, env.deps)
	if err != nil {
		t.Fatal(err)
	}
	if s.NodeName != "node-a" {
		t.Errorf("NodeName %q, want the lowercased hostname", s.NodeName)
	}
	if s.PrimaryIPFamily != v1.IPv4Protocol || s.NodeIPs[v1.IPv6Protocol].String() != "fd00::5" {
		t.Errorf("primary %s, node IPs %v", s.PrimaryIPFamily, s.NodeIPs)
	}
	if diff := cmp.Diff([]v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol}, s.IPFamilies); diff != "" {
		t.Errorf("IPFamilies (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"10.0.0.5/32", "fd00::5/128"}, s.NodePortAddresses); diff != "" {
		t.Errorf("NodePortAddresses (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"10.244.1.0/24", "fd00:244:1::/64"}, s.PodCIDRs); diff != "" {
		t.Errorf("PodCIDRs (-want +got):\n%s", diff)
	}
	if s.HealthzServer == nil {
		t.Error("no health server although healthzBindAddress is set")
	}
	if s.Proxier != env.provider || s.Recorder == nil || s.NodeRef.Name != "node-a" {
		t.Errorf("proxier, recorder or node ref not set: %+v", s)
	}
	if env.sysctl.values[sysctlConntrackMax] != 262144 {
		t.Errorf("conntrack max %d, want the kernel set up before the proxier", env.sysctl.values[sysctlConntrackMax])
	}

	// Single-stack kernel: one family only.
	env.deps.familySupported = func(f v1.IPFamily) error {
		if f == v1.IPv4Protocol {
			return nil
		}
		return errors.New("no usable ip6tables nat table")
	}
	if s, err = newProxyServer(context.Background(), o, env.deps); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]v1.IPFamily{v1.IPv4Protocol}, s.IPFamilies); diff != "" {
		t.Errorf("single-stack IPFamilies (-want +got):\n%s", diff)
	}

	// The nftables rules backend reaches the server, and needs no iptables nat
	// table for the second family.
	o.RulesBackend = ipvsproxy.RulesBackendNFTables
	env.deps.nftFamilySupported = func(v1.IPFamily) error { return nil }
	if s, err = newProxyServer(context.Background(), o, env.deps); err != nil {
		t.Fatal(err)
	}
	if s.RulesBackend != ipvsproxy.RulesBackendNFTables {
		t.Errorf("RulesBackend %q, want nftables", s.RulesBackend)
	}
	if diff := cmp.Diff([]v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol}, s.IPFamilies); diff != "" {
		t.Errorf("nftables backend IPFamilies (-want +got):\n%s", diff)
	}
}

// TestNewProxyServerWithoutNode: as upstream, a missing Node (or one without
// addresses) is logged and the node IP falls back to loopback; in detectLocalMode
// NodeCIDR a missing Node or podCIDRs no longer stop the daemon (upstream exits):
// the start-up values are marked assumed, for the node watch to learn
// (TestRunLearnsTheNodeAfterTheWaits).
func TestNewProxyServerWithoutNode(t *testing.T) {
	env := newTestEnv(t) // no Node object
	env.deps.nodeWaitTimeout = 100 * time.Millisecond
	s, err := newProxyServer(context.Background(), testOptions(t, nil), env.deps)
	if err != nil {
		t.Fatalf("missing node: %v, want loopback fallback", err)
	}
	if s.Node != nil || s.PrimaryIPFamily != v1.IPv4Protocol || !s.NodeIPs[v1.IPv4Protocol].Equal(net.IPv4(127, 0, 0, 1)) || !s.facts.ipsAssumed {
		t.Errorf("missing node: node %v, primary %s, node IPs %v, facts %v; want nil, IPv4, 127.0.0.1, assumed", s.Node, s.PrimaryIPFamily, s.NodeIPs, s.facts)
	}

	nodeCIDR := func(c *v1alpha1.KubeProxyConfiguration) { c.DetectLocalMode = "NodeCIDR" }
	if s, err = newProxyServer(context.Background(), testOptions(t, nodeCIDR), env.deps); err != nil {
		t.Errorf("NodeCIDR mode, missing node: %v, want a start with assumed values", err)
	} else if s.facts.complete(true) || len(s.PodCIDRs) != 0 {
		t.Errorf("NodeCIDR mode, missing node: facts %v, want incomplete without podCIDRs", s.facts)
	}

	// A Node without podCIDRs in NodeCIDR mode.
	env = newTestEnv(t, &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "node-a"},
		Status:     v1.NodeStatus{Addresses: []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "192.168.0.10"}}},
	})
	env.deps.nodeWaitTimeout = 100 * time.Millisecond
	s, err = newProxyServer(context.Background(), testOptions(t, nodeCIDR), env.deps)
	switch {
	case err != nil:
		t.Errorf("NodeCIDR mode, node without podCIDRs: %v, want a start without local detection", err)
	case s.facts.ipsAssumed || s.NodeIPs[v1.IPv4Protocol].String() != "192.168.0.10" || s.facts.complete(true):
		t.Errorf("NodeCIDR mode, node without podCIDRs: facts %v, want the node's IP and podCIDRs missing", s.facts)
	}
}

// TestIntegrationCreateProxierWithoutIPVS: on a kernel without IPVS (this host; run
// in a private namespace) the proxier is not created and the error says why.
func TestIntegrationCreateProxierWithoutIPVS(t *testing.T) {
	netns.Run(t, func(t *testing.T) {
		if h, err := ipvs.New(""); err == nil {
			h.Close()
			t.Skip("this kernel has IPVS (the VM): the no-IPVS error path is tested on the host")
		}
		env := newTestEnv(t, testNode())
		env.deps.newProvider = createProxier
		_, err := newProxyServer(context.Background(), testOptions(t, nil), env.deps)
		if err == nil || !strings.Contains(err.Error(), "needs IPVS") {
			t.Errorf("createProxier without IPVS: %v", err)
		}
	})
}

func startRun(t *testing.T, s *ProxyServer) (context.CancelFunc, chan error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("Run did not return after cancel")
		}
	})
	return cancel, done
}

func TestRunDeliversFilteredObjectsAndEmitsEvent(t *testing.T) {
	svc := func(name string, labels map[string]string) *v1.Service {
		return &v1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, Labels: labels}}
	}
	env := newTestEnv(t, testNode(),
		svc("web", nil),
		svc("headless", map[string]string{labelHeadless: ""}),
		svc("other-proxy", map[string]string{labelServiceProxyName: "cilium"}),
		&discovery.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web-abc"}, AddressType: discovery.AddressTypeIPv4},
	)
	ctx, cancelCtx := context.WithCancel(context.Background())
	defer cancelCtx()
	s, err := newProxyServer(ctx, testOptions(t, nil), env.deps)
	if err != nil {
		t.Fatal(err)
	}
	cancel, done := startRun(t, s)

	p := env.provider
	waitFor(t, "informers synced", func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.synced["services"] && p.synced["slices"] && p.synced["nodes"]
	})
	<-p.looping
	p.mu.Lock()
	var services []string
	for k := range p.services {
		services = append(services, k)
	}
	sort.Strings(services)
	gotSlices, gotNodes := p.slices["default/web-abc"], append([]string(nil), p.nodes...)
	p.mu.Unlock()
	if diff := cmp.Diff([]string{"default/web"}, services); diff != "" {
		t.Errorf("services delivered (-want +got); headless and other-proxy services must be filtered:\n%s", diff)
	}
	if !gotSlices {
		t.Error("EndpointSlice not delivered")
	}
	if diff := cmp.Diff([]string{"add node-a"}, gotNodes); diff != "" {
		t.Errorf("node events (-want +got):\n%s", diff)
	}

	waitFor(t, "Starting event", func() bool {
		events, err := env.client.EventsV1().Events("default").List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return false
		}
		for _, e := range events.Items {
			if e.Reason == "Starting" && e.Note == "Starting kube-proxy." && e.Regarding.Kind == "Node" && e.Regarding.Name == "node-a" && e.ReportingController == "kube-proxy" {
				return true
			}
		}
		return false
	})
	waitFor(t, "health server to learn the node", s.HealthzServer.NodeEligible)

	// The node informer watches only this node: a delete reaches the handlers,
	// and the health server sees it as being deleted.
	if err := env.client.CoreV1().Nodes().Delete(context.Background(), "node-a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "node deletion", func() bool { return !s.HealthzServer.NodeEligible() })

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run after cancel (SIGTERM) returned %v, want nil", err)
		}
		done <- nil
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
}

func TestRunExitsWhenConfigFileChanges(t *testing.T) {
	env := newTestEnv(t, testNode())
	path := writeFile(t, "kube-proxy.yaml", configHeader)
	o := testOptions(t, nil)
	o.ConfigFile = path
	s, err := newProxyServer(context.Background(), o, env.deps)
	if err != nil {
		t.Fatal(err)
	}
	_, done := startRun(t, s)
	time.Sleep(100 * time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("Run returned before the file changed: %v", err)
	default:
	}
	if err := os.WriteFile(path, []byte(configHeader+"mode: ipvs\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, errConfigChanged) || !strings.Contains(err.Error(), path) {
			t.Errorf("Run returned %v, want errConfigChanged naming %s", err, path)
		}
		done <- nil // let the cleanup see a return
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not exit after the config file changed")
	}
}

func TestRunBindFailure(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()

	for _, hardFail := range []bool{true, false} {
		t.Run(fmt.Sprintf("hardFail=%v", hardFail), func(t *testing.T) {
			env := newTestEnv(t, testNode())
			o := testOptions(t, func(c *v1alpha1.KubeProxyConfiguration) {
				c.MetricsBindAddress = busy.Addr().String()
				c.HealthzBindAddress = busy.Addr().String()
				c.BindAddressHardFail = hardFail
			})
			s, err := newProxyServer(context.Background(), o, env.deps)
			if err != nil {
				t.Fatal(err)
			}
			_, done := startRun(t, s)
			if hardFail {
				select {
				case err := <-done:
					if err == nil || !strings.Contains(err.Error(), "server on") {
						t.Errorf("Run returned %v, want the bind failure", err)
					}
					done <- nil
				case <-time.After(10 * time.Second):
					t.Fatal("bindAddressHardFail did not end Run")
				}
				return
			}
			// Without hard-fail the servers are retried (every 20ms here) and
			// Run keeps going.
			time.Sleep(200 * time.Millisecond)
			select {
			case err := <-done:
				t.Fatalf("Run ended without hard-fail: %v", err)
			default:
			}
		})
	}
}

func TestMetricsServerServes(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	env := newTestEnv(t, testNode())
	s, err := newProxyServer(context.Background(), testOptions(t, func(c *v1alpha1.KubeProxyConfiguration) { c.MetricsBindAddress = addr }), env.deps)
	if err != nil {
		t.Fatal(err)
	}
	startRun(t, s)
	var body string
	waitFor(t, "/proxyMode", func() bool {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			return false
		}
		defer conn.Close()
		fmt.Fprintf(conn, "GET /proxyMode HTTP/1.0\r\n\r\n")
		buf := make([]byte, 4096)
		n, _ := conn.Read(buf)
		body = string(buf[:n])
		return strings.Contains(body, "200 OK")
	})
	if !strings.HasSuffix(strings.TrimSpace(body), "ipvs") {
		t.Errorf("/proxyMode body %q, want ipvs", body)
	}
}

func TestKernelSetupLoadsConntrackModule(t *testing.T) {
	k, sc := testKernel(t, 1<<20)
	sc.values = map[string]int{} // nf_conntrack not loaded: no net/netfilter sysctls
	var loaded []string
	k.loadModule = func(_ context.Context, name string) error {
		loaded = append(loaded, name)
		sc.values[sysctlConntrackMax] = 65536
		return nil
	}
	if err := k.apply(context.Background(), proxyconfigapi.NewDefaultConfiguration()); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"nf_conntrack"}, loaded); diff != "" {
		t.Errorf("modules loaded (-want +got):\n%s", diff)
	}
	if sc.values[sysctlConntrackMax] != 262144 {
		t.Errorf("nf_conntrack_max %d after loading the module", sc.values[sysctlConntrackMax])
	}
	loaded = nil
	if err := k.apply(context.Background(), proxyconfigapi.NewDefaultConfiguration()); err != nil || loaded != nil {
		t.Errorf("module loaded again (%v) or error %v", loaded, err)
	}
}
