package ipvs

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/ipvs/rules"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/ipvs"
)

// The explain view (issue 32): what one family's proxier knows of one Service on
// this node, in one answer: every address it is reachable at, the real servers it
// wants and why each endpoint is in or out, what it believes the kernel holds and
// what the kernel holds now, the set members and rules that decide its traffic,
// what is refused or held back, and the last sync.

// Bounds of one explanation: the endpoints listed per port, and the virtual servers
// whose real servers are read from the kernel.
const (
	maxExplainEndpoints = 1000
	maxExplainLiveReads = 64
	explainLockWait     = 2 * time.Second
	explainReadTimeout  = 5 * time.Second
)

// ErrExplainBusy says a sync held the proxier for longer than an explanation waits.
var ErrExplainBusy = errors.New("the proxier is busy syncing; ask again")

// Explanation is what one family's proxier knows of one Service.
type Explanation struct {
	IPFamily     string               `json:"ipFamily"`
	Service      string               `json:"service"`
	RulesBackend string               `json:"rulesBackend"`
	Ports        []PortExplanation    `json:"ports"`
	SetMembers   []MemberExplanation  `json:"setMembers,omitempty"`
	OutFilter    []string             `json:"outFilterRules,omitempty"`
	Addresses    []AddressExplanation `json:"addresses,omitempty"`
	Refused      []RefusedValue       `json:"refused,omitempty"`
	HeldBack     []HeldBackObject     `json:"heldBack,omitempty"`
	// Notes say what the Service's state means where it is not obvious.
	Notes    []string        `json:"notes,omitempty"`
	LastSync SyncExplanation `json:"lastSync"`
}

// PortExplanation is one port of the Service.
type PortExplanation struct {
	Name                string                `json:"name"`
	Protocol            string                `json:"protocol"`
	Port                int                   `json:"port"`
	NodePort            int                   `json:"nodePort,omitempty"`
	HealthCheckNodePort int                   `json:"healthCheckNodePort,omitempty"`
	ExternalPolicyLocal bool                  `json:"externalTrafficPolicyLocal,omitempty"`
	InternalPolicyLocal bool                  `json:"internalTrafficPolicyLocal,omitempty"`
	VirtualServers      []VSExplanation       `json:"virtualServers"`
	Endpoints           []EndpointExplanation `json:"endpoints"`
	// EndpointsTruncated says endpoints beyond the bound were left out.
	EndpointsTruncated bool `json:"endpointsTruncated,omitempty"`
}

// VSExplanation is one virtual server of a port.
type VSExplanation struct {
	VirtualServer string `json:"virtualServer"`
	Scheduler     string `json:"scheduler"`
	Persistent    bool   `json:"persistent,omitempty"`
	Timeout       uint32 `json:"timeout,omitempty"`
	// Owner is the Service the virtual server went to when another one claims it.
	Owner   string              `json:"owner,omitempty"`
	Desired []RealServerExplain `json:"desired"`
	// Applied is what the proxier believes the kernel holds (nil: not there).
	Applied []RealServerExplain `json:"applied"`
	// Kernel is what the kernel holds now, read for this answer; KernelError says
	// why it could not be read (or was not: too many virtual servers).
	Kernel      []RealServerExplain `json:"kernel"`
	KernelError string              `json:"kernelError,omitempty"`
	// InSync: what the proxier believes the kernel holds is what it wants;
	// KernelDiffers: what the kernel holds now is not (someone changed it, or a
	// write is held back).
	InSync        bool `json:"inSync"`
	KernelDiffers bool `json:"kernelDiffers,omitempty"`
}

// RealServerExplain is one real server.
type RealServerExplain struct {
	Address      string `json:"address"`
	Weight       int32  `json:"weight"`
	ActiveConn   int    `json:"activeConnections,omitempty"`
	InactiveConn int    `json:"inactiveConnections,omitempty"`
}

// EndpointExplanation is one endpoint of a port and why it is in or out.
type EndpointExplanation struct {
	Address     string `json:"address"`
	Local       bool   `json:"local"`
	Ready       bool   `json:"ready"`
	Serving     bool   `json:"serving"`
	Terminating bool   `json:"terminating"`
	Used        bool   `json:"used"`
	Why         string `json:"why"`
}

// MemberExplanation is one set member the Service wants.
type MemberExplanation struct {
	Set     string `json:"set"`
	Member  string `json:"member"`
	Applied bool   `json:"applied"`
}

// AddressExplanation is one address the Service wants on kube-ipvs0.
type AddressExplanation struct {
	Address string `json:"address"`
	Bound   bool   `json:"bound"`
}

// RefusedValue is one value of the Service that is not programmed.
type RefusedValue struct {
	Field  string    `json:"field"`
	Value  string    `json:"value"`
	Reason string    `json:"reason"`
	Since  time.Time `json:"since,omitzero"`
}

// SyncExplanation is the proxier's last sync.
type SyncExplanation struct {
	Full     bool      `json:"full"`
	Error    string    `json:"error,omitempty"`
	Failed   int       `json:"failed"`
	LastFull time.Time `json:"lastFullSync,omitzero"`
}

// Explain tells what the proxier knows of Service name; nil when the Service has no
// port in this family. It waits for a running sync at most explainLockWait, then
// reads the kernel's real servers of at most maxExplainLiveReads virtual servers.
func (p *Proxier) Explain(ctx context.Context, name types.NamespacedName) (*Explanation, error) {
	deadline := time.Now().Add(explainLockWait)
	for !p.mu.TryLock() {
		if time.Now().After(deadline) {
			return nil, ErrExplainBusy
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	x, specs := p.explainLocked(name)
	p.mu.Unlock()
	if x == nil {
		return nil, nil
	}
	p.readLive(ctx, x, specs)
	x.HeldBack = slices.DeleteFunc(p.HeldBack(), func(h HeldBackObject) bool { return !slices.Contains(h.Services, name.String()) })
	return x, nil
}

// explainLocked gathers the explanation from the proxier's state (p.mu held) and
// the virtual servers to read live, by port and virtual server index.
func (p *Proxier) explainLocked(name types.NamespacedName) (*Explanation, map[[2]int]*ipvs.VirtualServer) {
	names := p.svcPorts[name]
	if len(names) == 0 {
		return nil, nil
	}
	st := p.index.services[name]
	x := &Explanation{IPFamily: string(p.opts.IPFamily), Service: name.String(), RulesBackend: p.rules.Name(),
		LastSync: SyncExplanation{Full: p.lastSync.Full, Failed: p.lastSync.Failed, LastFull: p.lastFull}}
	if p.lastSync.Err != nil {
		x.LastSync.Error = p.lastSync.Err.Error()
	}
	specs := map[[2]int]*ipvs.VirtualServer{}
	for _, sp := range names {
		spn, info := sp.Name, sp.Info
		pe := PortExplanation{Name: spn.Port, Protocol: string(info.Protocol), Port: info.Port, NodePort: info.NodePort,
			HealthCheckNodePort: info.HealthCheckNodePort(), ExternalPolicyLocal: info.ExternalPolicyLocal, InternalPolicyLocal: info.InternalPolicyLocal}
		var desired []*desiredVS
		if st != nil {
			for _, d := range st.virtualServers {
				if *d.port == spn {
					desired = append(desired, d)
				}
			}
		}
		for i, d := range desired {
			pe.VirtualServers = append(pe.VirtualServers, p.explainVS(name, d))
			specs[[2]int{len(x.Ports), i}] = d.vs
		}
		pe.Endpoints, pe.EndpointsTruncated = explainEndpoints(p.endpointsChanges.Endpoints(spn), desired)
		x.Ports = append(x.Ports, pe)
	}
	if st != nil {
		p.explainRules(x, st)
	}
	return x, specs
}

// explainVS is what the proxier wants and believes of one virtual server.
func (p *Proxier) explainVS(name types.NamespacedName, d *desiredVS) VSExplanation {
	v := VSExplanation{VirtualServer: d.key.String(), Scheduler: d.vs.Scheduler, Persistent: d.vs.Flags&ipvs.FlagPersistent != 0,
		Timeout: d.vs.Timeout, Desired: realServersExplained(d.realServers), InSync: true}
	if w := p.index.virtualServer(d.key); w != nil && w.owner() != name {
		v.Owner = w.owner().String()
	}
	if p.applied == nil {
		v.InSync = false
		return v
	}
	a := p.applied.vs[d.key]
	if a == nil {
		v.InSync = false
		return v
	}
	v.Applied = realServersExplained(a.rs)
	v.InSync = a.vs.Equal(d.vs) && slices.Equal(a.rs, d.realServers)
	return v
}

func realServersExplained(rss []desiredRS) []RealServerExplain {
	out := make([]RealServerExplain, 0, len(rss))
	for _, r := range rss {
		out = append(out, RealServerExplain{Address: r.key.String(), Weight: r.weight})
	}
	return out
}

// explainEndpoints says of each endpoint (at most maxExplainEndpoints) whether a
// virtual server of the port uses it, and why not.
func explainEndpoints(eps []*proxy.Endpoint, desired []*desiredVS) ([]EndpointExplanation, bool) {
	weights := map[rsKey]int32{}
	for _, d := range desired {
		for _, r := range d.realServers {
			weights[r.key] = max(weights[r.key], r.weight)
		}
	}
	out := []EndpointExplanation{}
	for i, ep := range eps {
		if i == maxExplainEndpoints {
			return out, true
		}
		e := EndpointExplanation{Address: ep.String(), Local: ep.IsLocal, Ready: ep.Ready, Serving: ep.Serving, Terminating: ep.Terminating}
		k, ok := rsKeyOf(ep)
		w, used := weights[k]
		switch {
		case !ok || unusableEndpoint(ep) != "":
			e.Why = "address not usable: " + unusableEndpoint(ep)
		case used && w > 0:
			e.Used, e.Why = true, "a real server"
		case used:
			e.Used, e.Why = true, "terminating: draining at weight 0"
		case ep.Terminating:
			e.Why = "terminating"
		case !ep.Ready:
			e.Why = "not ready"
		default:
			e.Why = "not chosen: traffic policy Local on another node, or topology"
		}
		out = append(out, e)
	}
	return out, false
}

// explainRules adds the set members, out-filter rules and addresses the Service
// wants, each with whether the kernel holds it, and the values it refuses.
func (p *Proxier) explainRules(x *Explanation, st *serviceState) {
	has := func(m rules.Member) bool { return p.applied != nil && p.applied.entries.Has(m) }
	for _, m := range st.setEntries {
		x.SetMembers = append(x.SetMembers, MemberExplanation{Set: m.Set.String(), Member: m.String(), Applied: has(m)})
	}
	for _, a := range st.bindAddrs {
		x.SetMembers = append(x.SetMembers, MemberExplanation{Set: rules.IPVSIPs.String(), Member: a, Applied: has(ipvsIPMember(a))})
		x.Addresses = append(x.Addresses, AddressExplanation{Address: a, Bound: p.applied != nil && p.applied.addrs.Has(a)})
	}
	for _, r := range st.outFilterRules {
		x.OutFilter = append(x.OutFilter, r.String())
	}
	if st.noLocalExternal {
		x.Notes = append(x.Notes, "externalTrafficPolicy is Local but this node has no local endpoint: its node port, external and load-balancer virtual servers use every endpoint (as upstream, kubernetes#97081)")
	}
	if st.noLocalInternal {
		x.Notes = append(x.Notes, "internalTrafficPolicy is Local but this node has no local endpoint: its ClusterIP virtual server uses every endpoint")
	}
	for _, r := range st.refused {
		x.Refused = append(x.Refused, RefusedValue{Field: r.field, Value: r.value, Reason: r.reason, Since: r.since})
	}
}

// readLive reads the kernel's real servers of the explanation's virtual servers.
func (p *Proxier) readLive(ctx context.Context, x *Explanation, specs map[[2]int]*ipvs.VirtualServer) {
	h := p.kernel.IPVS
	if p.kernel.Reader != nil && p.kernel.Reader.IPVS != nil {
		h = p.kernel.Reader.IPVS
	}
	ctx, cancel := context.WithTimeout(ctx, explainReadTimeout)
	defer cancel()
	reads := 0
	for pi := range x.Ports {
		for vi := range x.Ports[pi].VirtualServers {
			v := &x.Ports[pi].VirtualServers[vi]
			if reads == maxExplainLiveReads {
				v.KernelError = fmt.Sprintf("not read: an explanation reads at most %d virtual servers", maxExplainLiveReads)
				continue
			}
			reads++
			rss, err := h.GetRealServers(ctx, specs[[2]int{pi, vi}])
			if err != nil {
				v.KernelError = err.Error()
				continue
			}
			v.Kernel = []RealServerExplain{}
			for _, rs := range rss {
				v.Kernel = append(v.Kernel, RealServerExplain{Address: keyOfRS(rs.Address, rs.Port).String(), Weight: int32(rs.Weight),
					ActiveConn: rs.ActiveConn, InactiveConn: rs.InactiveConn})
			}
			slices.SortFunc(v.Kernel, func(a, b RealServerExplain) int { return strings.Compare(a.Address, b.Address) })
			v.KernelDiffers = !sameRealServers(v.Kernel, v.Desired)
		}
	}
}

// sameRealServers reports whether two lists hold the same addresses and weights.
func sameRealServers(a, b []RealServerExplain) bool {
	if len(a) != len(b) {
		return false
	}
	want := make(map[string]int32, len(b))
	for _, r := range b {
		want[r.Address] = r.Weight
	}
	for _, r := range a {
		if w, ok := want[r.Address]; !ok || w != r.Weight {
			return false
		}
	}
	return true
}
