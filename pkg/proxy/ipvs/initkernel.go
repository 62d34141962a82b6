package ipvs

import (
	"context"

	"k8s.io/klog/v2"
)

// PrepareKernel sets what the ipvs mode needs from the kernel, exactly as
// NewProxier does: the IPVS and forwarding sysctls (vs/conntrack,
// vs/expire_nodest_conn, vs/expire_quiescent_template, ip_forward,
// vs/conn_reuse_mode on kernels 4.1-5.8, arp_ignore/arp_announce with
// StrictARP) and the IPVS timeouts. Only opts.StrictARP, the timeouts and
// opts.KernelVersion are read; kernel needs Sysctl, and IPVS when a timeout is
// set. --init-only calls it so that the daemon can run afterwards with
// CAP_NET_ADMIN only (sysctls under /proc/sys/net need full privileges in a
// container).
func PrepareKernel(ctx context.Context, opts Options, kernel Kernel) error {
	_, err := prepareKernel(ctx, klog.FromContext(ctx), opts, kernel)
	return err
}
