package app

import (
	"context"
	"fmt"
)

// runCleanup removes everything kube-proxy programmed on the node (--cleanup).
// Only s.Config and s.FeatureGate are set: cleanup needs no apiserver.
func runCleanup(ctx context.Context, s *ProxyServer) error {
	return fmt.Errorf("removing ipvs, ipset and iptables state: %w", errNotImplemented)
}
