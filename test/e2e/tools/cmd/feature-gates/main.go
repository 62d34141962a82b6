// Command feature-gates prints the name of every feature gate upstream kube-proxy
// v1.37 accepts in --feature-gates and in KubeProxyConfiguration.featureGates: the
// Kubernetes gates (k8s.io/kubernetes/pkg/features, which also registers the
// apiserver, client-go and zpages gates) plus the logging and metrics gates
// kube-proxy adds. hack/update-known-feature-gates.sh turns the list into
// cmd/kube-proxy/app/zz_known_feature_gates.go.
package main

import (
	"fmt"
	"sort"

	utilfeature "k8s.io/apiserver/pkg/util/feature"
	logsapi "k8s.io/component-base/logs/api/v1"
	metricsfeatures "k8s.io/component-base/metrics/features"
	_ "k8s.io/kubernetes/pkg/features" // registers the Kubernetes gates
)

func main() {
	gate := utilfeature.DefaultMutableFeatureGate
	// Upstream kube-proxy adds these in its options; ignore "already added" errors.
	_ = logsapi.AddFeatureGates(gate)
	_ = metricsfeatures.AddFeatureGates(gate)
	var names []string
	for name := range gate.GetAll() {
		names = append(names, string(name))
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Println(n)
	}
}
