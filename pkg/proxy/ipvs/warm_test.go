package ipvs

import (
	"maps"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/healthcheck"

	nftrules "github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/ipvs/rules/nftables"
	nft "github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/nftables"
)

// warmBefore is what a previous daemon programmed: gone was deleted while it was
// down, and web lost 10.244.2.7 then.
func warmBefore() []any {
	return []any{
		makeService("ns", "web", clusterIP("10.96.0.10"), port("http", v1.ProtocolTCP, 80, 0)),
		makeSlice("ns", "web", "web-1", tcp("http", 8080), endpoint("10.244.1.5"), endpoint("10.244.2.7")),
		makeService("ns", "np", clusterIP("10.96.0.11"), port("dns", v1.ProtocolUDP, 53, 30053), etpLocal(31000)),
		makeSlice("ns", "np", "np-1", udp("dns", 53), endpoint("10.244.2.8")),
		makeService("ns", "gone", clusterIP("10.96.0.20"), port("http", v1.ProtocolTCP, 80, 30080)),
		makeSlice("ns", "gone", "gone-1", tcp("http", 8080), endpoint("10.244.3.1")),
		makeService("ns", "lb", clusterIP("10.96.0.12"), port("https", v1.ProtocolTCP, 443, 0),
			lbIngress("203.0.113.7"), sourceRanges("198.18.0.0/15"), etpLocal(32000)),
		makeSlice("ns", "lb", "lb-1", tcp("https", 8443), endpoint("10.244.2.9")),
	}
}

// warmLists are the lists the restarted daemon gets, in the chunks they arrive in:
// a Service before its slices, a slice before its Service, a second slice later.
func warmLists() [][]any {
	return [][]any{
		{makeService("ns", "web", clusterIP("10.96.0.10"), port("http", v1.ProtocolTCP, 80, 0))},
		{makeSlice("ns", "web", "web-1", tcp("http", 8080), endpoint("10.244.1.5")),
			makeSlice("ns", "fresh", "fresh-1", tcp("http", 8080), endpoint("10.244.5.5"))},
		{makeService("ns", "np", clusterIP("10.96.0.11"), port("dns", v1.ProtocolUDP, 53, 30053), etpLocal(31000)),
			makeSlice("ns", "np", "np-1", udp("dns", 53), endpoint("10.244.2.8")),
			makeService("ns", "fresh", clusterIP("10.96.0.30"), port("http", v1.ProtocolTCP, 8080, 0))},
		{makeService("ns", "lb", clusterIP("10.96.0.12"), port("https", v1.ProtocolTCP, 443, 0),
			lbIngress("203.0.113.7"), sourceRanges("198.18.0.0/15"), etpLocal(32000)),
			makeSlice("ns", "lb", "lb-1", tcp("https", 8443), endpoint("10.244.2.9")),
			makeSlice("ns", "web", "web-2", tcp("http", 8080), endpoint("10.244.4.4"))},
	}
}

// warmKernel is every line of what the node's kernel holds for the proxier:
// IPVS, the addresses, and the backend's sets and rules.
func warmKernel(t *testing.T, e *testEnv, rs nft.Ruleset) string {
	t.Helper()
	s := e.ipvs.Dump() + e.nl.Dump() + "\n"
	if rs != nil {
		return s + nftDump(t, rs)
	}
	return s + e.setMembers() + e.iptablesSave()
}

// missingLines lists the lines of before that now lacks.
func missingLines(before, now string) []string {
	// A link's addresses are on its line: each is an item of its own.
	items := func(s string) []string {
		var out []string
		for _, l := range strings.Split(s, "\n") {
			if name, addrs, ok := strings.Cut(l, ": "); ok && strings.HasPrefix(name, "kube-ipvs0") {
				for _, a := range strings.Fields(addrs) {
					out = append(out, name+": "+a)
				}
				continue
			}
			out = append(out, l)
		}
		return out
	}
	have := map[string]bool{}
	for _, l := range items(now) {
		have[l] = true
	}
	var out []string
	for _, l := range items(before) {
		if !have[l] {
			out = append(out, l)
		}
	}
	return out
}

// TestWarmStartRemovesNothingUntilTheListsAreComplete: a daemon restarted with warm
// start programs each chunk of the lists as it arrives (a new Service, a new real
// server) while everything the previous daemon wrote stays, also what the complete
// lists no longer want; the sync after the lists are complete takes that away, and
// the node ends exactly as a cold start from the same lists leaves it. The Services'
// health check servers start only then.
func TestWarmStartRemovesNothingUntilTheListsAreComplete(t *testing.T) {
	for _, backend := range []string{RulesBackendIPTables, RulesBackendNFTables} {
		t.Run(backend, func(t *testing.T) {
			env := func() (*testEnv, nft.Ruleset) {
				if backend == RulesBackendNFTables {
					rs := nft.NewFakeRuleset(nftrules.Table())
					return newNFTEnv(t, v1.IPv4Protocol, rs), rs
				}
				return newTestEnv(t, v1.IPv4Protocol), nil
			}
			e, rs := env()
			e.start(warmBefore()...)
			before := warmKernel(t, e, rs)

			// The restart: a new proxier on the same kernel.
			e.opts.WarmStart = true
			e.hc = healthcheck.NewFakeServiceHealthServer()
			e.opts.ServiceHealth = e.hc
			e.useRulesBackend(backend, rs, backend == RulesBackendNFTables)
			for i, chunk := range warmLists() {
				for _, o := range chunk {
					e.add(o)
				}
				st := e.mustSync()
				if !st.Warm {
					t.Fatalf("chunk %d: the sync before the lists are complete was not warm", i)
				}
				now := warmKernel(t, e, rs)
				if gone := missingLines(before, now); len(gone) > 0 {
					t.Errorf("chunk %d: a warm sync removed %q", i, gone)
				}
				if svcs, eps := e.hc.Calls(); svcs+eps > 0 {
					t.Errorf("chunk %d: a warm sync started health check servers", i)
				}
				if i == 2 && !strings.Contains(now, "10.96.0.30:8080") {
					t.Errorf("chunk %d: the new Service is not programmed before the lists are complete:\n%s", i, e.ipvs.Dump())
				}
				if i == 3 && !strings.Contains(now, "-> 10.244.4.4:8080") {
					t.Errorf("chunk %d: the new endpoint is not programmed before the lists are complete:\n%s", i, e.ipvs.Dump())
				}
			}
			e.p.OnServiceSynced()
			e.p.OnEndpointSlicesSynced()
			if st := e.p.LastSyncStats(); st.Warm || !st.Full || st.Err != nil {
				t.Fatalf("the sync after the lists are complete: warm %v, full %v, error %v", st.Warm, st.Full, st.Err)
			}
			e.p.waitBeside()

			cold, crs := env()
			var all []any
			for _, chunk := range warmLists() {
				all = append(all, chunk...)
			}
			cold.start(all...)
			diff(t, "kernel after a warm start against a cold start", warmKernel(t, cold, crs), warmKernel(t, e, rs))
			if got, want := e.hc.Services(), cold.hc.Services(); len(want) == 0 || !maps.Equal(got, want) {
				t.Errorf("health check servers after the lists are complete: %v, a cold start's %v", got, want)
			}
			for _, gone := range []string{"10.96.0.20", "10.244.2.7", "10.244.3.1"} {
				if strings.Contains(warmKernel(t, e, rs), gone) {
					t.Errorf("%s is still programmed after the lists are complete", gone)
				}
			}
		})
	}
}

// TestWarmStartOnAFreshNode: on a node with nothing of ours yet, warm syncs
// program each chunk as it arrives (no warm sync fails: the rules, and the jumps
// into them, wait for the lists), and the node ends as a cold start leaves it.
func TestWarmStartOnAFreshNode(t *testing.T) {
	for _, backend := range []string{RulesBackendIPTables, RulesBackendNFTables} {
		t.Run(backend, func(t *testing.T) {
			env := func(warm bool) (*testEnv, nft.Ruleset) {
				mod := func(o *Options) { o.WarmStart = warm }
				if backend == RulesBackendNFTables {
					rs := nft.NewFakeRuleset(nftrules.Table())
					return newNFTEnv(t, v1.IPv4Protocol, rs, mod), rs
				}
				return newTestEnv(t, v1.IPv4Protocol, mod), nil
			}
			e, rs := env(true)
			var all []any
			for i, chunk := range warmLists() {
				for _, o := range chunk {
					e.add(o)
				}
				all = append(all, chunk...)
				if st := e.mustSync(); !st.Warm {
					t.Fatalf("chunk %d: the sync was not warm", i)
				}
			}
			if !strings.Contains(e.ipvs.Dump(), "-> 10.244.4.4:8080") {
				t.Errorf("the warm syncs did not program the endpoints:\n%s", e.ipvs.Dump())
			}
			e.p.OnServiceSynced()
			e.p.OnEndpointSlicesSynced()
			if st := e.p.LastSyncStats(); st.Warm || !st.Full || st.Err != nil {
				t.Fatalf("the sync after the lists are complete: warm %v, full %v, error %v", st.Warm, st.Full, st.Err)
			}
			e.p.waitBeside()
			cold, crs := env(false)
			cold.start(all...)
			diff(t, "kernel after a warm start against a cold start", warmKernel(t, cold, crs), warmKernel(t, e, rs))
		})
	}
}

// TestWarmStartBuildsAServiceOnceItsEndpointsArrive: a warm sync leaves a Service
// whose slices have not arrived unbuilt, and builds it once, with its real servers,
// when they come; a Service that has no slice at all is programmed by the sync
// after the lists are complete. The real servers a later slice adds go pipelined.
func TestWarmStartBuildsAServiceOnceItsEndpointsArrive(t *testing.T) {
	e := newTestEnv(t, v1.IPv4Protocol, func(o *Options) { o.WarmStart = true })
	c := &countingWrites{Interface: e.ipvs}
	e.p.kernel.IPVS = c
	web := makeService("ns", "web", clusterIP("10.96.0.10"), port("http", v1.ProtocolTCP, 80, 0))
	bare := makeService("ns", "bare", clusterIP("10.96.0.11"), port("http", v1.ProtocolTCP, 80, 0))
	web1 := makeSlice("ns", "web", "web-1", tcp("http", 8080), endpoint("10.244.1.5"))
	web2 := makeSlice("ns", "web", "web-2", tcp("http", 8080), endpoint("10.244.4.4"))
	chunks := [][]any{{web, bare}, {web1}, {web2}}
	wantBuilt := []int{0, 1, 1}
	for i, chunk := range chunks {
		for _, o := range chunk {
			e.add(o)
		}
		st := e.mustSync()
		if !st.Warm || st.Services != wantBuilt[i] {
			t.Errorf("chunk %d: warm %v, %d Services built, want a warm sync building %d", i, st.Warm, st.Services, wantBuilt[i])
		}
		d := e.ipvs.Dump()
		if i == 0 && strings.Contains(d, "10.96.0.1") {
			t.Errorf("chunk %d: a Service without its endpoints was programmed:\n%s", i, d)
		}
		if i >= 1 && !strings.Contains(d, "TCP  10.96.0.10:80 rr\n  -> 10.244.1.5:8080 Masq 1 0 0\n") {
			t.Errorf("chunk %d: web is not programmed with its endpoint:\n%s", i, d)
		}
	}
	if c.writes != 2 || c.singles != 0 || c.rsSingles != 0 {
		t.Errorf("%d pipelined writes, %d single virtual server adds, %d single real server adds; want 2, 0 and 0",
			c.writes, c.singles, c.rsSingles)
	}
	e.p.OnServiceSynced()
	e.p.OnEndpointSlicesSynced()
	if st := e.p.LastSyncStats(); st.Warm || !st.Full || st.Err != nil {
		t.Fatalf("the sync after the lists are complete: warm %v, full %v, error %v", st.Warm, st.Full, st.Err)
	}
	e.p.waitBeside()
	cold := newTestEnv(t, v1.IPv4Protocol)
	cold.start(web, bare, web1, web2)
	diff(t, "kernel after a warm start against a cold start", warmKernel(t, cold, nil), warmKernel(t, e, nil))
	if !strings.Contains(e.ipvs.Dump(), "TCP  10.96.0.11:80 rr\n") {
		t.Errorf("the Service without slices is not programmed after the lists are complete:\n%s", e.ipvs.Dump())
	}
}
