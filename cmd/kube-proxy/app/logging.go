package app

import (
	"fmt"

	"k8s.io/component-base/featuregate"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/kube-proxy/config/v1alpha1"
)

// applyLogging switches klog to the configured format, verbosity and vmodule.
// It is called once, after validation, and only when the daemon runs.
func applyLogging(cfg *v1alpha1.KubeProxyConfiguration, fg featuregate.FeatureGate) error {
	if err := logsapi.ValidateAndApply(&cfg.Logging, fg); err != nil {
		return fmt.Errorf("initialising logging: %w", err)
	}
	return nil
}
