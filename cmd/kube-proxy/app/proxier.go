package app

import (
	"context"
	"fmt"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy"
)

// createProxier builds the ipvs proxier (one per family in s.IPFamilies behind a
// meta-proxier when dual-stack) from s.Config, s.NodeName, s.NodeIPs,
// s.PrimaryIPFamily, s.NodePortAddresses, s.Client, s.Recorder, s.HealthzServer
// and s.Sysctl. Its SyncLoop must return when ctx ends.
func createProxier(ctx context.Context, s *ProxyServer) (proxy.Provider, error) {
	return nil, fmt.Errorf("ipvs proxier: %w", errNotImplemented)
}
