package app

import (
	"sort"

	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/component-base/featuregate"
	logsapi "k8s.io/component-base/logs/api/v1"
	metricsfeatures "k8s.io/component-base/metrics/features"
	zpagesfeatures "k8s.io/component-base/zpages/features"
)

// emulatedVersion is the upstream release whose flags, config and feature gates
// this daemon accepts.
var emulatedVersion = version.MustParse("1.37")

// Feature gates upstream kube-proxy 1.37 reads (pkg/features). They are accepted
// so an upstream --feature-gates value or featureGates map keeps working; only
// KubeProxyIPVS changes what this daemon does (it refuses to start when the gate
// is explicitly disabled, as upstream's ipvs mode would).
const (
	KubeProxyIPVS                       featuregate.Feature = "KubeProxyIPVS"
	ServiceTrafficDistribution          featuregate.Feature = "ServiceTrafficDistribution"
	PreferSameTrafficDistribution       featuregate.Feature = "PreferSameTrafficDistribution"
	TopologyAwareHints                  featuregate.Feature = "TopologyAwareHints"
	LoadBalancerIPMode                  featuregate.Feature = "LoadBalancerIPMode"
	KubeProxyDrainingTerminatingNodes   featuregate.Feature = "KubeProxyDrainingTerminatingNodes"
	NFTablesProxyMode                   featuregate.Feature = "NFTablesProxyMode"
	KubeProxyNFTablesLocalhostNodePorts featuregate.Feature = "KubeProxyNFTablesLocalhostNodePorts"
	WinDSR                              featuregate.Feature = "WinDSR"
	WinOverlay                          featuregate.Feature = "WinOverlay"
)

func v(s string) *version.Version { return version.MustParse(s) }

var kubeProxyFeatureGates = map[featuregate.Feature]featuregate.VersionedSpecs{
	// KEP-5495: IPVS mode is deprecated; the gate defaults to off from 1.40.
	KubeProxyIPVS: {
		{Version: v("1.0"), Default: true, PreRelease: featuregate.GA},
		{Version: v("1.37"), Default: true, PreRelease: featuregate.Deprecated},
	},
	ServiceTrafficDistribution: {
		{Version: v("1.30"), Default: false, PreRelease: featuregate.Alpha},
		{Version: v("1.31"), Default: true, PreRelease: featuregate.Beta},
		{Version: v("1.33"), Default: true, PreRelease: featuregate.GA, LockToDefault: true},
	},
	PreferSameTrafficDistribution: {
		{Version: v("1.33"), Default: false, PreRelease: featuregate.Alpha},
		{Version: v("1.34"), Default: true, PreRelease: featuregate.Beta},
	},
	TopologyAwareHints: {
		{Version: v("1.21"), Default: false, PreRelease: featuregate.Alpha},
		{Version: v("1.24"), Default: true, PreRelease: featuregate.Beta},
		{Version: v("1.33"), Default: true, PreRelease: featuregate.GA, LockToDefault: true},
	},
	LoadBalancerIPMode: {
		{Version: v("1.29"), Default: false, PreRelease: featuregate.Alpha},
		{Version: v("1.30"), Default: true, PreRelease: featuregate.Beta},
		{Version: v("1.32"), Default: true, PreRelease: featuregate.GA, LockToDefault: true},
	},
	KubeProxyDrainingTerminatingNodes: {
		{Version: v("1.28"), Default: false, PreRelease: featuregate.Alpha},
		{Version: v("1.30"), Default: true, PreRelease: featuregate.Beta},
		{Version: v("1.31"), Default: true, PreRelease: featuregate.GA, LockToDefault: true},
	},
	NFTablesProxyMode: {
		{Version: v("1.29"), Default: false, PreRelease: featuregate.Alpha},
		{Version: v("1.31"), Default: true, PreRelease: featuregate.Beta},
		{Version: v("1.33"), Default: true, PreRelease: featuregate.GA, LockToDefault: true},
	},
	KubeProxyNFTablesLocalhostNodePorts: {
		{Version: v("1.36"), Default: false, PreRelease: featuregate.Alpha},
	},
	WinDSR: {
		{Version: v("1.14"), Default: false, PreRelease: featuregate.Alpha},
		{Version: v("1.33"), Default: true, PreRelease: featuregate.Beta},
	},
	WinOverlay: {
		{Version: v("1.14"), Default: false, PreRelease: featuregate.Alpha},
		{Version: v("1.20"), Default: true, PreRelease: featuregate.Beta},
	},
}

// newFeatureGate returns a gate at the emulated version holding the kube-proxy
// gates plus the component-base ones (logging, metrics, zpages) upstream
// registers. Each command invocation gets its own gate, so in-process tests do
// not leak settings into each other.
func newFeatureGate() featuregate.MutableVersionedFeatureGate {
	fg := featuregate.NewVersionedFeatureGate(emulatedVersion)
	for _, add := range []func(featuregate.MutableVersionedFeatureGate) error{
		func(g featuregate.MutableVersionedFeatureGate) error { return g.AddVersioned(kubeProxyFeatureGates) },
		logsapi.AddFeatureGates,
		metricsfeatures.AddFeatureGates,
		zpagesfeatures.AddFeatureGates,
	} {
		if err := add(fg); err != nil {
			// The specs are static; a failure is a programming error caught by tests.
			panic(err)
		}
	}
	return fg
}

// splitFeatureGates separates the gates this daemon registers (and names nobody knows,
// which SetFromMap rejects as upstream does) from the Kubernetes gates upstream
// kube-proxy accepts without using them for anything kube-proxy-ipvs does: a manifest
// that passes, say, a kubelet gate cluster-wide must keep working. The inert names are
// returned sorted.
func splitFeatureGates(m map[string]bool, fg featuregate.MutableVersionedFeatureGate) (map[string]bool, []string) {
	known := fg.GetAll()
	out := make(map[string]bool, len(m))
	var inert []string
	for name, on := range m {
		_, ours := known[featuregate.Feature(name)]
		_, kube := knownKubernetesFeatureGates[name]
		if !ours && kube {
			inert = append(inert, name)
			continue
		}
		out[name] = on
	}
	sort.Strings(inert)
	return out, inert
}
