package ipvs

import (
	"context"
	"fmt"
	"net"

	"k8s.io/klog/v2"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/ipvs"
	kernelversion "github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/kernel"
)

// Sysctls the ipvs mode needs.
const (
	sysctlVSConnTrack             = "net/ipv4/vs/conntrack"
	sysctlConnReuse               = "net/ipv4/vs/conn_reuse_mode"
	sysctlExpireNoDestConn        = "net/ipv4/vs/expire_nodest_conn"
	sysctlExpireQuiescentTemplate = "net/ipv4/vs/expire_quiescent_template"
	sysctlForward                 = "net/ipv4/ip_forward"
	sysctlArpIgnore               = "net/ipv4/conf/all/arp_ignore"
	sysctlArpAnnounce             = "net/ipv4/conf/all/arp_announce"
)

// prepareKernel sets what the ipvs mode needs and reports whether the kernel is one
// whose conn_reuse_mode=0 makes weight-0 draining unsafe (4.1 <= v < 5.9).
func prepareKernel(ctx context.Context, logger klog.Logger, opts Options, kernel Kernel) (oldKernel bool, err error) {
	connReuseNeeded := false
	if opts.KernelVersion != "" {
		v, err := kernelversion.ParseVersion(opts.KernelVersion)
		if err != nil {
			return false, err
		}
		connReuseNeeded = kernelversion.SetConnReuseModeZero(v)
	}
	settings := []struct {
		name  string
		value int
	}{
		{sysctlVSConnTrack, 1},
		{sysctlExpireNoDestConn, 1},
		{sysctlExpireQuiescentTemplate, 1},
		{sysctlForward, 1},
	}
	if connReuseNeeded {
		// kubernetes#70747: with the default mode, a new connection reusing a port of
		// an old one is dropped for a second; 0 avoids that on these kernels.
		settings = append(settings, struct {
			name  string
			value int
		}{sysctlConnReuse, 0})
	}
	if opts.StrictARP {
		// kubernetes#59976: do not answer ARP for service addresses on kube-ipvs0.
		settings = append(settings, struct {
			name  string
			value int
		}{sysctlArpIgnore, 1}, struct {
			name  string
			value int
		}{sysctlArpAnnounce, 2})
	}
	if kernel.Sysctl != nil {
		for _, s := range settings {
			if cur, err := kernel.Sysctl.GetSysctl(s.name); err == nil && cur == s.value {
				continue
			}
			if err := kernel.Sysctl.SetSysctl(s.name, s.value); err != nil {
				return false, fmt.Errorf("setting sysctl %s=%d: %w", s.name, s.value, err)
			}
			logger.V(1).Info("Set sysctl", "sysctl", s.name, "value", s.value)
		}
	}
	if opts.TCPTimeout > 0 || opts.TCPFinTimeout > 0 || opts.UDPTimeout > 0 {
		if err := kernel.IPVS.ConfigureTimeouts(ctx, opts.TCPTimeout, opts.TCPFinTimeout, opts.UDPTimeout); err != nil {
			logger.Error(err, "Failed to configure IPVS timeouts")
		}
	}
	return connReuseNeeded, nil
}

// CanUseIPVS checks that the kernel accepts a virtual server with the scheduler, by
// creating and deleting a probe in TEST-NET-2 (as upstream does).
func CanUseIPVS(ctx context.Context, h ipvs.Interface, scheduler string) error {
	if scheduler == "" {
		scheduler = defaultScheduler
	}
	vss, err := h.GetVirtualServers(ctx)
	if err != nil {
		return fmt.Errorf("IPVS is not usable: %w", err)
	}
	for _, vs := range vss {
		if vs.Scheduler == scheduler {
			return nil
		}
	}
	probe := &ipvs.VirtualServer{Address: net.ParseIP("198.51.100.0"), Protocol: ipvs.TCP, Port: 20000, Scheduler: scheduler}
	if err := h.AddVirtualServer(ctx, probe); err != nil && !ipvs.IsExists(err) {
		return fmt.Errorf("IPVS is not usable with scheduler %q: %w", scheduler, err)
	}
	if err := h.DeleteVirtualServer(ctx, probe); err != nil {
		return fmt.Errorf("deleting IPVS probe %s: %w", probe, err)
	}
	return nil
}
