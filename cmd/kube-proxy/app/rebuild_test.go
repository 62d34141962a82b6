package app

// Test addresses: nodes use 10.0.0.0/24 and fd00::/64, pod CIDRs 10.244.1.0/24 and
// fd00:244:1::/64 (they exist only in the fake apiserver); nothing is dialled.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2"
	"k8s.io/kube-proxy/config/v1alpha1"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy"
)

// built is what one newProvider call was given, and the provider it made.
type built struct {
	nodeIPs           string // primary first
	nodePortAddresses []string
	// detector is the local-traffic detection each family's rules get.
	detector map[v1.IPFamily][]string
	provider *fakeProvider
	stopped  chan struct{} // closed when the provider's SyncLoop returned
}

// summary is the values a test compares.
func (b *built) summary() string {
	return fmt.Sprintf("nodeIPs=%s nodePortAddresses=%v detector=%v", b.nodeIPs, b.nodePortAddresses, b.detector)
}

// trackedProvider is a fakeProvider whose SyncLoop's return is observable.
type trackedProvider struct {
	*fakeProvider
	stopped chan struct{}
}

func (p *trackedProvider) SyncLoop() {
	p.fakeProvider.SyncLoop()
	close(p.stopped)
}

// buildRecorder is a newProvider that records every build; fail, when set, makes
// the build with that index (from 0) fail.
type buildRecorder struct {
	mu     sync.Mutex
	builds []*built
	fail   map[int]bool
}

func (r *buildRecorder) newProvider(ctx context.Context, s *ProxyServer) (proxy.Provider, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fail[len(r.builds)] {
		r.builds = append(r.builds, nil)
		return nil, errors.New("injected build failure")
	}
	b := &built{nodeIPs: s.facts.ipsString(), nodePortAddresses: s.NodePortAddresses, detector: map[v1.IPFamily][]string{},
		provider: newFakeProvider(ctx), stopped: make(chan struct{})}
	name := fmt.Sprintf("build %d", len(r.builds))
	s.HeldBack = func() any { return name } // what the metrics server lists is the running proxier's
	for _, f := range s.IPFamilies {
		b.detector[f] = localDetectorArgs(klog.Background(), s.Config, s.PodCIDRs, f)
	}
	r.builds = append(r.builds, b)
	return &trackedProvider{b.provider, b.stopped}, nil
}

// get returns build i, nil if it failed or has not happened.
func (r *buildRecorder) get(i int) *built {
	r.mu.Lock()
	defer r.mu.Unlock()
	if i >= len(r.builds) {
		return nil
	}
	return r.builds[i]
}

func (r *buildRecorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.builds)
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// apiserverDown makes every request of the fake clientset fail while down is set,
// as an unreachable apiserver does.
func apiserverDown(client *k8stesting.Fake, down *atomic.Bool) {
	refused := errors.New("dial tcp 10.0.0.1:6443: connect: connection refused")
	client.PrependReactor("*", "*", func(k8stesting.Action) (bool, runtime.Object, error) {
		if down.Load() {
			return true, nil, refused
		}
		return false, nil, nil
	})
	client.PrependWatchReactor("*", func(k8stesting.Action) (bool, watch.Interface, error) {
		if down.Load() {
			return true, nil, refused
		}
		return false, nil, nil
	})
}

// outageOptions: nodePortAddresses primary and detectLocalMode NodeCIDR, whose
// values come from the Node.
func outageOptions(t *testing.T) *Options {
	return testOptions(t, func(c *v1alpha1.KubeProxyConfiguration) {
		c.NodePortAddresses = []string{"primary"}
		c.DetectLocalMode = "NodeCIDR"
	})
}

// wantFromNode is what a proxier built from testNode() gets.
const wantFromNode = "nodeIPs=10.0.0.5,fd00::5 nodePortAddresses=[10.0.0.5/32 fd00::5/128] " +
	"detector=map[IPv4:[! -s 10.244.1.0/24] IPv6:[! -s fd00:244:1::/64]]"

// TestRunLearnsTheNodeAfterTheWaits: the apiserver is unreachable while the daemon
// starts (longer than the node wait): it starts anyway with upstream's fallbacks
// (loopback, no podCIDRs; NodeCIDR no longer exits), its health server answers
// alive, and no proxier runs until the node watch can read the Node, so nothing
// is programmed from the assumed values. Once the apiserver answers, the proxier
// is rebuilt from the Node before its first sync: node IPs, NodePort addresses
// from `primary` and the NodeCIDR local-traffic detection are the Node's, and the
// assumed proxier never ran.
func TestRunLearnsTheNodeAfterTheWaits(t *testing.T) {
	env := newTestEnv(t, testNode())
	var down atomic.Bool
	down.Store(true)
	apiserverDown(&env.client.Fake, &down)
	rec := &buildRecorder{}
	env.deps.newProvider = rec.newProvider
	env.deps.nodeWaitTimeout = 100 * time.Millisecond

	s, err := newProxyServer(context.Background(), outageOptions(t), env.deps)
	if err != nil {
		t.Fatalf("start with the apiserver unreachable: %v", err)
	}
	if got, want := rec.get(0).summary(), "nodeIPs=127.0.0.1 nodePortAddresses=[] detector=map[IPv4:[] IPv6:[]]"; got != want {
		t.Errorf("proxier built at start:\n got %s\nwant %s", got, want)
	}
	_, done := startRun(t, s)
	time.Sleep(300 * time.Millisecond)
	if isClosed(rec.get(0).provider.looping) {
		t.Error("the proxier built from assumed values runs while the Node is unreadable")
	}
	if h := s.HealthzServer.Health(); !h.Healthy || s.HealthzServer.NodeEligible() {
		t.Errorf("apiserver down: health %+v, node eligible %v; want alive (/livez 200) and not eligible (/healthz 503), as upstream", h, s.HealthzServer.NodeEligible())
	}

	down.Store(false)
	waitFor(t, "a proxier built from the Node to run", func() bool {
		b := rec.get(1)
		return b != nil && isClosed(b.provider.looping)
	})
	if got := rec.get(1).summary(); got != wantFromNode {
		t.Errorf("proxier rebuilt from the Node:\n got %s\nwant %s", got, wantFromNode)
	}
	if isClosed(rec.get(0).provider.looping) {
		t.Error("the proxier built from assumed values ran")
	}
	if !isClosed(rec.get(0).provider.ctx.Done()) {
		t.Error("the assumed proxier's context was not cancelled")
	}
	p := rec.get(1).provider
	waitFor(t, "the rebuilt proxier to get the Node and the informers' sync", func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.synced["services"] && p.synced["slices"] && p.synced["nodes"] && len(p.nodes) > 0
	})
	waitFor(t, "the health server to learn the node", s.HealthzServer.NodeEligible)
	if n := rec.count(); n != 2 {
		t.Errorf("%d proxiers built, want 2", n)
	}
	select {
	case err := <-done:
		t.Fatalf("Run returned %v", err)
		done <- nil
	default:
	}
}

// TestRunRebuildsWhenTheNodeAppearsLater: the apiserver answers but the Node does
// not exist at start (registered late): the proxier runs with the fallbacks, as
// upstream's, and when the Node appears (first without podCIDRs, then with them) it
// is rebuilt for each: the running proxier is stopped (its sync loop returned) before
// the next one runs, and only the latest runs.
func TestRunRebuildsWhenTheNodeAppearsLater(t *testing.T) {
	env := newTestEnv(t)
	rec := &buildRecorder{}
	env.deps.newProvider = rec.newProvider
	env.deps.nodeWaitTimeout = 100 * time.Millisecond
	s, err := newProxyServer(context.Background(), outageOptions(t), env.deps)
	if err != nil {
		t.Fatal(err)
	}
	startRun(t, s)
	waitFor(t, "the assumed proxier to run once the node watch listed no Node", func() bool { return isClosed(rec.get(0).provider.looping) })

	node := testNode()
	node.Spec.PodCIDRs = nil
	if _, err := env.client.CoreV1().Nodes().Create(context.Background(), node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a proxier for the Node's IPs", func() bool { b := rec.get(1); return b != nil && isClosed(b.provider.looping) })
	if !isClosed(rec.get(0).stopped) {
		t.Error("the first proxier's sync loop still runs")
	}
	want := "nodeIPs=10.0.0.5,fd00::5 nodePortAddresses=[10.0.0.5/32 fd00::5/128] detector=map[IPv4:[] IPv6:[]]"
	if got := rec.get(1).summary(); got != want {
		t.Errorf("proxier for the Node without podCIDRs:\n got %s\nwant %s", got, want)
	}

	node.Spec.PodCIDRs = testNode().Spec.PodCIDRs
	if _, err := env.client.CoreV1().Nodes().Update(context.Background(), node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a proxier for the Node's podCIDRs", func() bool { b := rec.get(2); return b != nil && isClosed(b.provider.looping) })
	if got := rec.get(2).summary(); got != wantFromNode {
		t.Errorf("proxier for the complete Node:\n got %s\nwant %s", got, wantFromNode)
	}
	if !isClosed(rec.get(1).stopped) {
		t.Error("the second proxier's sync loop still runs")
	}
	if got := s.live.heldBack(); got != "build 2" {
		t.Errorf("the metrics server lists the held-back objects of %v, want build 2", got)
	}
	p := rec.get(2).provider
	waitFor(t, "the latest proxier to get the Node", func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return len(p.nodes) > 0 && p.nodes[0] == "add node-a"
	})
}

// TestRunNodeEventsWithoutNewFactsKeepTheProxier: Node updates that change nothing
// the proxier is built from (labels, a heartbeat) reach the running proxier (it
// reads the topology labels) and build nothing; a Node that loses its addresses
// or is deleted leaves the proxier with what it knew; a changed node IP rebuilds it
// (upstream exits for the same reason).
func TestRunNodeEventsWithoutNewFactsKeepTheProxier(t *testing.T) {
	env := newTestEnv(t, testNode())
	rec := &buildRecorder{}
	env.deps.newProvider = rec.newProvider
	s, err := newProxyServer(context.Background(), outageOptions(t), env.deps)
	if err != nil {
		t.Fatal(err)
	}
	startRun(t, s)
	p := rec.get(0).provider
	<-p.looping // complete facts: it runs at once, before the node watch lists
	waitFor(t, "the node watch to list", func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.synced["nodes"]
	})
	nodes := env.client.CoreV1().Nodes()
	update := func(mutate func(*v1.Node)) {
		t.Helper()
		n, err := nodes.Get(context.Background(), "node-a", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		mutate(n)
		if _, err := nodes.Update(context.Background(), n, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	update(func(n *v1.Node) { n.Labels = map[string]string{v1.LabelTopologyZone: "zone-a"} })
	update(func(n *v1.Node) { n.Status.Addresses = nil })
	waitFor(t, "the proxier to get both updates", func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return strings.Count(strings.Join(p.nodes, ","), "update node-a") == 2
	})
	if err := nodes.Delete(context.Background(), "node-a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the proxier to get the deletion", func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return strings.Contains(strings.Join(p.nodes, ","), "delete node-a")
	})
	time.Sleep(200 * time.Millisecond)
	if n := rec.count(); n != 1 {
		t.Fatalf("%d proxiers built, want 1: nothing it is built from changed", n)
	}

	changed := testNode()
	changed.Status.Addresses[0].Address = "10.0.0.6"
	if _, err := nodes.Create(context.Background(), changed, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a proxier for the new node IP", func() bool { b := rec.get(1); return b != nil && isClosed(b.provider.looping) })
	want := strings.ReplaceAll(wantFromNode, "10.0.0.5", "10.0.0.6")
	if got := rec.get(1).summary(); got != want {
		t.Errorf("proxier for the new node IP:\n got %s\nwant %s", got, want)
	}
}

// TestRunRebuildFailureKeepsTheProxier: a rebuild that fails leaves the running
// proxier running and is retried after rebuildRetry (Node events meanwhile do not
// retry it sooner); the daemon does not exit.
func TestRunRebuildFailureKeepsTheProxier(t *testing.T) {
	env := newTestEnv(t)
	rec := &buildRecorder{fail: map[int]bool{1: true}}
	env.deps.newProvider = rec.newProvider
	env.deps.nodeWaitTimeout = 50 * time.Millisecond
	env.deps.rebuildRetry = time.Second
	s, err := newProxyServer(context.Background(), outageOptions(t), env.deps)
	if err != nil {
		t.Fatal(err)
	}
	_, done := startRun(t, s)
	waitFor(t, "the assumed proxier to run", func() bool { return isClosed(rec.get(0).provider.looping) })
	node, err := env.client.CoreV1().Nodes().Create(context.Background(), testNode(), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the failed rebuild", func() bool { return rec.count() == 2 })
	failed := time.Now()
	node.Labels = map[string]string{"a": "b"}
	if _, err := env.client.CoreV1().Nodes().Update(context.Background(), node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the retried rebuild", func() bool { b := rec.get(2); return b != nil && isClosed(b.provider.looping) })
	if waited := time.Since(failed); waited < 800*time.Millisecond {
		t.Errorf("the rebuild was retried %s after it failed, want rebuildRetry (1s)", waited)
	}
	if rec.get(1) != nil {
		t.Fatal("the second build was to fail")
	}
	if got := rec.get(2).summary(); got != wantFromNode {
		t.Errorf("retried rebuild:\n got %s\nwant %s", got, wantFromNode)
	}
	if !isClosed(rec.get(0).stopped) {
		t.Error("the first proxier still runs after the retried rebuild")
	}
	select {
	case err := <-done:
		t.Fatalf("Run returned %v after a failed rebuild", err)
		done <- nil
	default:
	}
}

// TestRunRebuildForgetsDroppedFamily: a rebuild whose proxier runs for fewer
// families (an IPv6-only Node on a kernel whose IPv4 has no usable nat table, after
// the IPv4 loopback fallback) leaves no queued change of the dropped family
// behind to fail /livez.
func TestRunRebuildForgetsDroppedFamily(t *testing.T) {
	node := testNode()
	node.Status.Addresses = node.Status.Addresses[1:] // fd00::5 only
	env := newTestEnv(t)
	rec := &buildRecorder{}
	env.deps.newProvider = rec.newProvider
	env.deps.nodeWaitTimeout = 50 * time.Millisecond
	env.deps.familySupported = func(f v1.IPFamily) error {
		if f == v1.IPv4Protocol {
			return errors.New("no usable iptables nat table")
		}
		return nil
	}
	s, err := newProxyServer(context.Background(), testOptions(t, func(c *v1alpha1.KubeProxyConfiguration) {
		c.IPVS.SyncPeriod.Duration = 50 * time.Millisecond // /livez fails 100 ms after a queued change
	}), env.deps)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol}, s.IPFamilies); diff != "" {
		t.Fatalf("families at start (-want +got):\n%s", diff)
	}
	startRun(t, s)
	waitFor(t, "the assumed proxier to run", func() bool { return isClosed(rec.get(0).provider.looping) })
	// The IPv4 proxier's sync loop reported in (as the real one does when it
	// starts), then got a change it never synced.
	s.HealthzServer.Updated(v1.IPv4Protocol)
	s.HealthzServer.QueuedUpdate(v1.IPv4Protocol)
	if _, err := env.client.CoreV1().Nodes().Create(context.Background(), node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the IPv6-only proxier", func() bool { b := rec.get(1); return b != nil && isClosed(b.provider.looping) })
	if got := rec.get(1).summary(); !strings.HasPrefix(got, "nodeIPs=fd00::5 ") || strings.Contains(got, "IPv4") {
		t.Errorf("rebuilt proxier %s, want IPv6 only", got)
	}
	time.Sleep(200 * time.Millisecond)
	if h := s.HealthzServer.Health(); !h.Healthy {
		t.Errorf("/livez fails after IPv4's proxier went away: %+v", h)
	}
}

// String prints the facts in one line, for the tests' comparisons and messages.
func (f nodeFacts) String() string {
	return fmt.Sprintf("nodeIPs=%s assumed=%v podCIDRs=%v", f.ipsString(), f.ipsAssumed, f.podCIDRs)
}

// TestNodeFactsLearn: what a Node seen by the watch changes in the facts.
func TestNodeFactsLearn(t *testing.T) {
	assumed := startNodeFacts(nil, "0.0.0.0")
	node := testNode()
	noAddrs := testNode()
	noAddrs.Status.Addresses = nil
	noCIDRs := testNode()
	noCIDRs.Spec.PodCIDRs = nil
	known := startNodeFacts(node, "0.0.0.0")
	for _, tc := range []struct {
		name     string
		from     nodeFacts
		node     *v1.Node
		nodeCIDR bool
		want     []string
	}{
		{"assumed, Node read", assumed, node, true, []string{"nodeIPs", "podCIDRs"}},
		{"assumed, Node read, podCIDRs not compared", assumed, node, false, []string{"nodeIPs"}},
		{"assumed, still nothing", assumed, nil, true, nil},
		{"assumed, Node without addresses", assumed, noAddrs, true, []string{"podCIDRs"}},
		{"known, same Node", known, node, true, nil},
		{"known, Node deleted", known, nil, true, nil},
		{"known, addresses gone", known, noAddrs, true, nil},
		{"known, podCIDRs gone", known, noCIDRs, true, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			next := tc.from.learn(tc.node, "0.0.0.0")
			if diff := cmp.Diff(tc.want, tc.from.changes(next, tc.nodeCIDR)); diff != "" {
				t.Errorf("changes (-want +got):\n%s", diff)
			}
			if len(tc.want) == 0 && next.String() != tc.from.String() {
				t.Errorf("nothing changes, but the facts went from %s to %s", tc.from, next)
			}
		})
	}
	if next := assumed.learn(node, "0.0.0.0"); !next.complete(true) || next.String() != known.String() {
		t.Errorf("assumed facts that learnt the Node: %s, want %s and complete", next, known)
	}
}
