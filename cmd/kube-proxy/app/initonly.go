package app

import (
	"context"
	"fmt"

	"k8s.io/klog/v2"

	ipvsproxy "github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/ipvs"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/ipvs"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/kernel"
)

// initOnlyKernel is what --init-only touches besides kernelSetup, swapped in
// tests.
type initOnlyKernel struct {
	openIPVS      func() (ipvs.Interface, error)
	kernelVersion func() (string, error)
}

func defaultInitOnlyKernel() initOnlyKernel {
	return initOnlyKernel{
		openIPVS: func() (ipvs.Interface, error) { return ipvs.New("") },
		kernelVersion: func() (string, error) {
			v, err := kernel.ReadVersion(kernel.DefaultRoot)
			if err != nil {
				return "", err
			}
			return v.String(), nil
		},
	}
}

// runInitOnly is --init-only: every privileged kernel setting the daemon would
// make, without the apiserver: the OOM score and conntrack sysctls
// (setupKernel), then ip_vs loaded and the ipvs mode's sysctls and IPVS
// timeouts (ipvsproxy.PrepareKernel, the same code the proxier runs). The
// daemon started afterwards finds them set and writes nothing.
func (s *ProxyServer) runInitOnly(ctx context.Context, ik initOnlyKernel) error {
	logger := klog.FromContext(ctx)
	if err := s.setupKernel(ctx); err != nil {
		return err
	}
	k := s.deps.kernel
	if k.sysctl == nil {
		k = defaultKernelSetup()
	}
	// The vs/* sysctls exist only once ip_vs is loaded.
	if k.loadModule != nil {
		if err := k.loadModule(ctx, "ip_vs"); err != nil {
			logger.Info("Could not load ip_vs; the IPVS sysctls will fail if it is not built in", "err", err)
		}
	}
	release, err := ik.kernelVersion()
	if err != nil {
		logger.Error(err, "Failed to read the kernel version; assuming a current kernel")
		release = ""
	}
	cfg := s.Config
	opts := ipvsproxy.Options{
		StrictARP:     cfg.IPVS.StrictARP,
		TCPTimeout:    cfg.IPVS.TCPTimeout.Duration,
		TCPFinTimeout: cfg.IPVS.TCPFinTimeout.Duration,
		UDPTimeout:    cfg.IPVS.UDPTimeout.Duration,
		KernelVersion: release,
	}
	kern := ipvsproxy.Kernel{Sysctl: k.sysctl}
	if opts.TCPTimeout > 0 || opts.TCPFinTimeout > 0 || opts.UDPTimeout > 0 {
		h, err := ik.openIPVS()
		if err != nil {
			return fmt.Errorf("setting the IPVS timeouts: %w", err)
		}
		kern.IPVS = h
	}
	if err := ipvsproxy.PrepareKernel(ctx, opts, kern); err != nil {
		return fmt.Errorf("setting up the kernel for IPVS: %w", err)
	}
	logger.Info("Kernel set up for the ipvs mode; exiting (--init-only)")
	return nil
}
