package ipvs

import (
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
)

// Events the proxier emits on a Service part of which is not programmed.
const (
	eventReasonNotProgrammed = "KubeProxyValueNotProgrammed"
	eventActionSync          = "SyncProxyRules"
)

// updateClusterOwners refreshes, for the Services about to be rebuilt, which Service
// each ClusterIP virtual server key belongs to, and adds to changed every Service whose
// external or LoadBalancer address collides with a ClusterIP key that appeared or
// vanished: it must be rebuilt to give the address up or take it back.
func (p *Proxier) updateClusterOwners(changed sets.Set[types.NamespacedName]) {
	var affected []vsKey
	for name := range changed {
		keys := p.clusterKeysOf(name)
		old := p.index.services[name].clusterKeys()
		if slices.Equal(old, keys) {
			continue
		}
		for _, k := range old {
			if _, still := slices.BinarySearchFunc(keys, k, compareVSKeys); still {
				continue
			}
			if owner := p.bc.clusterOwner[k]; owner != nil && *owner == name {
				delete(p.bc.clusterOwner, k)
			}
			affected = append(affected, k)
		}
		for _, k := range keys {
			if _, had := slices.BinarySearchFunc(old, k, compareVSKeys); had {
				continue
			}
			// The API server never gives two Services one ClusterIP; should it happen, the
			// name that sorts first keeps it, as for any other shared key.
			if cur, ok := p.bc.clusterOwner[k]; !ok || name.String() < cur.String() {
				// keys is not empty: the Service has ports.
				p.bc.clusterOwner[k] = &p.svcPorts[name][0].Name.NamespacedName
			}
			affected = append(affected, k)
		}
	}
	for _, k := range affected {
		for n := range p.extClaims[k] {
			changed.Insert(n)
		}
	}
}

// clusterKeysOf returns the ClusterIP virtual server keys the Service's state will
// have once rebuilt (serviceState.clusterKeys), sorted: those of its usable ClusterIPs
// (an unusable address is refused as an external address too).
func (p *Proxier) clusterKeysOf(name types.NamespacedName) []vsKey {
	var keys []vsKey
	for _, sp := range p.svcPorts[name] {
		if info := sp.Info; info.ClusterIP != nil && unusableAddress(info.ClusterIP) == "" {
			keys = append(keys, makeVSKey(string(info.Protocol), info.ClusterIP, uint16(info.Port)))
		}
	}
	slices.SortFunc(keys, compareVSKeys)
	return slices.Compact(keys)
}

// noteExternalKeys remembers which external and LoadBalancer keys a Service asks for.
func (p *Proxier) noteExternalKeys(name types.NamespacedName, st *serviceState) {
	var keys []vsKey
	if st != nil {
		keys = st.externalKeys
	}
	old := p.extKeys[name]
	if slices.Equal(old, keys) {
		return
	}
	for _, k := range old {
		if s := p.extClaims[k]; s != nil {
			s.Delete(name)
			if s.Len() == 0 {
				delete(p.extClaims, k)
			}
		}
	}
	for _, k := range keys {
		s := p.extClaims[k]
		if s == nil {
			s = sets.New[types.NamespacedName]()
			p.extClaims[k] = s
		}
		s.Insert(name)
	}
	if len(keys) == 0 {
		delete(p.extKeys, name)
	} else {
		p.extKeys[name] = keys
	}
}

// noteRefusals reports each value of a Service that is not programmed once, when it
// first appears: a Warning Event on the Service and one log line. Full resyncs rebuild
// every Service and find the same refusals, which are not reported again.
func (p *Proxier) noteRefusals(name types.NamespacedName, st *serviceState, now time.Time) {
	prev := p.refusals[name]
	var cur []refusal
	if st != nil {
		cur = st.refused
	}
	if len(cur) == 0 {
		delete(p.refusals, name)
		return
	}
	for i := range cur {
		r := &cur[i]
		if j := slices.IndexFunc(prev, func(o refusal) bool { return o.field == r.field && o.value == r.value }); j >= 0 {
			r.since = prev[j].since
			continue
		}
		r.since = now
		p.logger.V(2).Info("Not programming a value of a Service", "service", name, "field", r.field, "value", r.value, "reason", r.reason)
		p.event(name, "%s %s of Service %s not programmed by kube-proxy: %s", r.field, r.value, name, r.reason)
	}
	p.refusals[name] = cur
}

// reportFailures emits one Warning Event on each owner of an object the kernel refused
// for the first time (one per topic and Service, e.g. one for a refused scheduler on
// all of a Service's virtual servers).
func (p *Proxier) reportFailures(out *outcome) {
	type sent struct {
		owner types.NamespacedName
		topic string
	}
	done := map[sent]bool{}
	for _, f := range out.failures {
		if r := p.retries[f.key]; r == nil || r.attempts != 1 {
			continue
		}
		for _, owner := range f.owners {
			if f.topic != "" {
				if done[sent{owner, f.topic}] {
					continue
				}
				done[sent{owner, f.topic}] = true
			}
			p.event(owner, "kube-proxy could not program %s (retrying): %v", f.what, f.err)
		}
	}
}

func (p *Proxier) event(name types.NamespacedName, format string, args ...any) {
	if p.opts.Recorder == nil {
		return
	}
	// The UID is the one the sync loop took with the Service's ports (none for a
	// Service that is gone).
	var uid types.UID
	if ports := p.svcPorts[name]; len(ports) > 0 {
		uid = ports[0].Info.UID
	}
	ref := &v1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: name.Namespace, Name: name.Name, UID: uid}}
	p.opts.Recorder.Eventf(ref, nil, v1.EventTypeWarning, eventReasonNotProgrammed, eventActionSync, format, args...)
}
