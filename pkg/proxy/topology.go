package proxy

import (
	"cmp"
	"slices"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
)

// CategorizeEndpoints picks, for one service port, the endpoints this node sends
// traffic to, with upstream's rules:
//
//   - clusterEndpoints (nil unless the port uses Cluster policy): the ready endpoints,
//     narrowed by topology hints; if none is ready, the serving-terminating ones
//     (without topology: that fallback only tries not to drop connections).
//   - localEndpoints (nil unless the port uses Local policy): the local ready
//     endpoints, or if there are none the local serving-terminating ones.
//   - allReachableEndpoints: the union of the two, sorted by String().
//   - hasAnyEndpoints: whether a usable endpoint exists anywhere in the cluster, even
//     if none is reachable from this node.
//
// Topology comes only from the hints on the endpoints: the EndpointSlice controller
// writes them according to spec.trafficDistribution (PreferSameNode, PreferSameZone,
// PreferClose) or the service.kubernetes.io/topology-mode annotation, and kube-proxy
// itself reads neither (as in upstream's current pkg/proxy/topology.go). nodeLabels
// supplies this node's topology.kubernetes.io/zone.
func CategorizeEndpoints(endpoints []*Endpoint, svcInfo *ServicePortInfo, nodeName string, nodeLabels map[string]string) (clusterEndpoints, localEndpoints, allReachableEndpoints []*Endpoint, hasAnyEndpoints bool) {
	if len(endpoints) == 0 {
		return nil, nil, nil, false
	}

	var mode topologyMode
	if svcInfo.UsesClusterEndpoints() {
		zone := nodeLabels[v1.LabelTopologyZone]
		mode = topologyModeFromHints(svcInfo, endpoints, nodeName, zone)
		clusterEndpoints = filterEndpoints(endpoints, func(ep *Endpoint) bool {
			return ep.Ready && mode.allows(ep, nodeName, zone)
		})
		if len(clusterEndpoints) == 0 {
			// A topology mode is only chosen when it matches a ready endpoint, so
			// an empty result here means nothing is ready anywhere.
			clusterEndpoints = filterEndpoints(endpoints, servingTerminating)
		}
		hasAnyEndpoints = len(clusterEndpoints) > 0
	}

	if !svcInfo.UsesLocalEndpoints() {
		return clusterEndpoints, nil, clusterEndpoints, hasAnyEndpoints
	}

	var localReady, localServingTerminating bool
	for _, ep := range endpoints {
		switch {
		case ep.Ready:
			hasAnyEndpoints = true
			localReady = localReady || ep.IsLocal
		case servingTerminating(ep):
			hasAnyEndpoints = true
			localServingTerminating = localServingTerminating || ep.IsLocal
		}
	}
	usingTerminating := false
	switch {
	case localReady:
		localEndpoints = filterEndpoints(endpoints, func(ep *Endpoint) bool { return ep.IsLocal && ep.Ready })
	case localServingTerminating:
		usingTerminating = true
		localEndpoints = filterEndpoints(endpoints, func(ep *Endpoint) bool { return ep.IsLocal && servingTerminating(ep) })
	}

	if !svcInfo.UsesClusterEndpoints() {
		return nil, localEndpoints, localEndpoints, hasAnyEndpoints
	}
	if mode == topologyNone && !usingTerminating {
		// clusterEndpoints holds every ready endpoint and localEndpoints only
		// ready ones, so the former already contains the latter.
		return clusterEndpoints, localEndpoints, clusterEndpoints, hasAnyEndpoints
	}
	// Topology can leave local endpoints out of clusterEndpoints and the local set
	// can hold terminating endpoints the cluster set lacks: merge.
	union := make(map[string]*Endpoint, len(clusterEndpoints)+len(localEndpoints))
	for _, ep := range clusterEndpoints {
		union[ep.String()] = ep
	}
	for _, ep := range localEndpoints {
		union[ep.String()] = ep
	}
	allReachableEndpoints = make([]*Endpoint, 0, len(union))
	for _, ep := range union {
		allReachableEndpoints = append(allReachableEndpoints, ep)
	}
	slices.SortFunc(allReachableEndpoints, func(a, b *Endpoint) int { return cmp.Compare(a.String(), b.String()) })
	return clusterEndpoints, localEndpoints, allReachableEndpoints, hasAnyEndpoints
}

type topologyMode int

const (
	topologyNone     topologyMode = iota // every ready endpoint
	topologySameZone                     // ready endpoints hinted for this node's zone
	topologySameNode                     // ready endpoints hinted for this node
)

func (m topologyMode) allows(ep *Endpoint, nodeName, zone string) bool {
	switch m {
	case topologySameNode:
		return ep.NodeHints().Has(nodeName)
	case topologySameZone:
		return ep.ZoneHints().Has(zone)
	default:
		return true
	}
}

// topologyModeFromHints: same-node if every ready endpoint has node hints and one is
// hinted for this node; else same-zone if every ready endpoint has zone hints and one
// is hinted for this node's zone; else none. Requiring hints on every endpoint makes a
// half-updated slice fall back to all endpoints rather than overload a few.
func topologyModeFromHints(svcInfo *ServicePortInfo, endpoints []*Endpoint, nodeName, zone string) topologyMode {
	anyReady := false
	allNodeHints, forThisNode := true, false
	allZoneHints, forThisZone := true, false
	for _, ep := range endpoints {
		if !ep.Ready {
			continue
		}
		anyReady = true
		if ep.NodeHints().Len() == 0 {
			allNodeHints = false
		} else if ep.NodeHints().Has(nodeName) {
			forThisNode = true
		}
		if ep.ZoneHints().Len() == 0 {
			allZoneHints = false
		} else if ep.ZoneHints().Has(zone) {
			forThisZone = true
		}
	}
	if !anyReady {
		return topologyNone
	}
	if allNodeHints {
		if forThisNode {
			return topologySameNode
		}
		klog.V(2).InfoS("Ignoring same-node topology hints since none is for this node", "servicePort", svcInfo.String(), "node", nodeName)
	}
	if allZoneHints {
		if forThisZone {
			return topologySameZone
		}
		if zone == "" {
			klog.V(2).InfoS("Ignoring same-zone topology hints since the node has no zone label", "servicePort", svcInfo.String(), "label", v1.LabelTopologyZone)
		} else {
			klog.V(2).InfoS("Ignoring same-zone topology hints since none is for this zone", "servicePort", svcInfo.String(), "zone", zone)
		}
	}
	return topologyNone
}

func servingTerminating(ep *Endpoint) bool { return ep.Serving && ep.Terminating }

func filterEndpoints(endpoints []*Endpoint, keep func(*Endpoint) bool) []*Endpoint {
	out := make([]*Endpoint, 0, len(endpoints))
	for _, ep := range endpoints {
		if keep(ep) {
			out = append(out, ep)
		}
	}
	return out
}
