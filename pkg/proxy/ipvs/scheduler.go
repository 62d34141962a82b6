package ipvs

import (
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/apis/config"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/ipvs"
)

// flagSched3 is IP_VS_SVC_F_SCHED3, the third scheduler-specific flag (no stock
// scheduler reads it today; ipvsadm calls it flag-3).
const flagSched3 = 0x0020

// schedulerFlagNames are the values of kube-proxy-ipvs.io/scheduler-flags, by their
// ipvsadm names. A flag named after a scheduler applies to that scheduler only.
var schedulerFlagNames = map[string]struct {
	scheduler string // "" for any
	flag      uint32
}{
	"sh-fallback": {"sh", ipvs.FlagSchedSH1},
	"sh-port":     {"sh", ipvs.FlagSchedSH2},
	"mh-fallback": {"mh", ipvs.FlagSchedSH1},
	"mh-port":     {"mh", ipvs.FlagSchedSH2},
	"flag-1":      {"", ipvs.FlagSchedSH1},
	"flag-2":      {"", ipvs.FlagSchedSH2},
	"flag-3":      {"", flagSched3},
	// ops is one-packet scheduling: every UDP datagram is scheduled on its own,
	// so senders behind one address and port spread over the real servers. With
	// NAT the replies of such a "connection" are not translated back (IPVS keeps
	// no entry for them): only for protocols that need no reply.
	"ops": {"", ipvs.FlagOnePacket},
}

// kubeRouterSchedulers are the values kube-router accepts in
// kube-router.io/service.scheduler.
var kubeRouterSchedulers = []string{"rr", "lc", "dh", "sh", "mh"}

// chooseScheduler returns the scheduler and scheduler flags of a Service's virtual
// servers: the configured ones unless the Service's annotations choose others. A value
// that cannot be used is refused (one Event) and the configured choice stays.
//
// mh always gets mh-fallback (kubernetes#139497): a terminating endpoint's real server
// drains at weight 0, and the kernel keeps it in mh's table by its last non-zero
// weight, so without the flag every new connection of a client hashed to it is refused
// ("no destination available") until it is deleted; with it they go to the next real
// server of the client's hash sequence.
func chooseScheduler(configured string, svc *proxy.ServicePortInfo) (string, uint32, []refusal) {
	scheduler, flags := configured, defaultFlags(configured)
	var refused []refusal
	switch svc.SchedulerSource {
	case proxy.AnnotationScheduler:
		if svc.Scheduler != "" {
			if slices.Contains(config.IPVSSchedulers, svc.Scheduler) {
				scheduler, flags = svc.Scheduler, defaultFlags(svc.Scheduler)
			} else {
				refused = append(refused, refusal{field: "annotation " + proxy.AnnotationScheduler, value: svc.Scheduler,
					reason: "not an IPVS scheduler (" + strings.Join(config.IPVSSchedulers, ", ") + "); using " + configured})
			}
		}
		if svc.SchedulerFlags != "" {
			f, bad := parseSchedulerFlags(scheduler, string(svc.Protocol), svc.SchedulerFlags)
			refused = append(refused, bad...)
			if f != 0 || len(bad) == 0 {
				flags = f
			}
		}
	case proxy.AnnotationKubeRouterScheduler:
		if svc.Scheduler != "" {
			if slices.Contains(kubeRouterSchedulers, svc.Scheduler) {
				// kube-router sets no flags unless its flags annotation asks for them.
				scheduler, flags = svc.Scheduler, 0
			} else {
				refused = append(refused, refusal{field: "annotation " + proxy.AnnotationKubeRouterScheduler, value: svc.Scheduler,
					reason: "kube-router accepts " + strings.Join(kubeRouterSchedulers, ", ") + "; using " + configured})
			}
		}
		if svc.SchedulerFlags != "" {
			if scheduler != "mh" || svc.Scheduler != "mh" {
				// As kube-router: its flags apply to its mh scheduler only.
				refused = append(refused, refusal{field: "annotation " + proxy.AnnotationKubeRouterSchedFlags, value: svc.SchedulerFlags,
					reason: "kube-router applies scheduler flags to scheduler mh only; ignored"})
				break
			}
			var f uint32
			for _, tok := range strings.Split(svc.SchedulerFlags, ",") {
				tok = strings.TrimSpace(tok)
				if def, ok := schedulerFlagNames[tok]; ok && def.scheduler == "" {
					f |= def.flag
					continue
				}
				refused = append(refused, refusal{field: "annotation " + proxy.AnnotationKubeRouterSchedFlags, value: tok,
					reason: "kube-router accepts flag-1, flag-2, flag-3; ignored"})
			}
			flags = f
		}
	}
	if scheduler == "mh" {
		flags |= ipvs.FlagSchedSH1
	}
	return scheduler, flags, refused
}

// defaultFlags are the flags a scheduler gets without an annotation: upstream sets
// source-port hashing with mh.
func defaultFlags(scheduler string) uint32 {
	if scheduler == "mh" {
		return FlagSourceHash
	}
	return 0
}

// parseSchedulerFlags parses kube-proxy-ipvs.io/scheduler-flags for scheduler and
// the port's protocol.
func parseSchedulerFlags(scheduler, protocol, value string) (uint32, []refusal) {
	var flags uint32
	var refused []refusal
	for _, tok := range strings.Split(value, ",") {
		tok = strings.TrimSpace(tok)
		if tok == "" {
			continue
		}
		def, ok := schedulerFlagNames[tok]
		switch {
		case !ok:
			refused = append(refused, refusal{field: "annotation " + proxy.AnnotationSchedulerFlags, value: tok,
				reason: "unknown scheduler flag (sh-fallback, sh-port, mh-fallback, mh-port, flag-1, flag-2, flag-3, ops); ignored"})
		case tok == "ops" && protocol != string(v1.ProtocolUDP):
			refused = append(refused, refusal{field: "annotation " + proxy.AnnotationSchedulerFlags, value: tok,
				reason: "one-packet scheduling applies to UDP ports only, not " + protocol + "; ignored"})
		case def.scheduler != "" && def.scheduler != scheduler:
			refused = append(refused, refusal{field: "annotation " + proxy.AnnotationSchedulerFlags, value: tok,
				reason: "applies to scheduler " + def.scheduler + ", not " + scheduler + "; ignored"})
		default:
			flags |= def.flag
		}
	}
	return flags, refused
}
