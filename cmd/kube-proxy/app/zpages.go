package app

import (
	"time"

	"github.com/spf13/pflag"
	zpagesfeatures "k8s.io/component-base/zpages/features"

	proxymetrics "github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/metrics"
)

// processStart is when the daemon started, as /statusz reports it.
var processStart = time.Now()

// metricsServerPaths are the paths the metrics server serves (/statusz lists them).
var metricsServerPaths = []string{
	"/configz", "/debug/flags/v", "/debug/pprof/", "/flagz", "/healthz", "/metrics", "/metrics/slis",
	"/proxyMode", "/statusz", proxymetrics.HeldBackPath,
}

// zpages are upstream's /flagz and /statusz on the metrics server, each behind its
// feature gate (ComponentFlagz, ComponentStatusz: beta, on by default in 1.37).
func (s *ProxyServer) zpages() proxymetrics.ZPages {
	z := proxymetrics.ZPages{
		Component:        componentName,
		Statusz:          s.FeatureGate.Enabled(zpagesfeatures.ComponentStatusz),
		Start:            processStart,
		BinaryVersion:    binaryVersion(),
		EmulationVersion: emulatedVersion.String(),
		Paths:            metricsServerPaths,
	}
	if s.Flags != nil && s.FeatureGate.Enabled(zpagesfeatures.ComponentFlagz) {
		flags := s.Flags
		z.Flags = func() map[string]string {
			out := map[string]string{}
			flags.VisitAll(func(f *pflag.Flag) {
				if len(f.Annotations["classified"]) > 0 {
					out[f.Name] = "CLASSIFIED"
					return
				}
				out[f.Name] = f.Value.String()
			})
			return out
		}
	}
	return z
}
