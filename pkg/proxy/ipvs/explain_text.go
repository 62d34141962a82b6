package ipvs

import (
	"fmt"
	"strings"
	"time"
)

// Text is the explanation for people.
func (x *Explanation) Text() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Service %s (%s, rules backend %s)\n", x.Service, x.IPFamily, x.RulesBackend)
	for _, pe := range x.Ports {
		x.portText(&b, pe)
	}
	if len(x.Addresses) > 0 {
		b.WriteString("  addresses on kube-ipvs0:\n")
		for _, a := range x.Addresses {
			fmt.Fprintf(&b, "    %s %s\n", a.Address, yesNo(a.Bound, "bound", "NOT BOUND"))
		}
	}
	if len(x.SetMembers) > 0 {
		b.WriteString("  set members:\n")
		for _, m := range x.SetMembers {
			fmt.Fprintf(&b, "    %s %s %s\n", m.Set, m.Member, yesNo(m.Applied, "in the kernel", "NOT IN THE KERNEL"))
		}
	}
	for _, r := range x.OutFilter {
		fmt.Fprintf(&b, "  out filter: %s\n", r)
	}
	for _, r := range x.Refused {
		fmt.Fprintf(&b, "  REFUSED %s %q: %s\n", r.Field, r.Value, r.Reason)
	}
	for _, n := range x.Notes {
		fmt.Fprintf(&b, "  note: %s\n", n)
	}
	for _, h := range x.HeldBack {
		fmt.Fprintf(&b, "  HELD BACK %s (%s): %s; attempts %d, next retry %s\n", h.Object, h.Reason, h.Error, h.Attempts, h.NextRetry.Format(time.RFC3339))
	}
	last := "succeeded"
	if x.LastSync.Error != "" {
		last = "failed: " + x.LastSync.Error
	}
	fmt.Fprintf(&b, "  last sync (full: %v) %s, %d objects refused; last full sync %s\n", x.LastSync.Full, last, x.LastSync.Failed,
		x.LastSync.LastFull.Format(time.RFC3339))
	return b.String()
}

func (x *Explanation) portText(b *strings.Builder, pe PortExplanation) {
	name := pe.Name
	if name == "" {
		name = "(unnamed)"
	}
	fmt.Fprintf(b, "  port %s %d/%s", name, pe.Port, pe.Protocol)
	if pe.NodePort != 0 {
		fmt.Fprintf(b, " nodePort %d", pe.NodePort)
	}
	if pe.ExternalPolicyLocal {
		b.WriteString(" externalTrafficPolicy=Local")
	}
	if pe.InternalPolicyLocal {
		b.WriteString(" internalTrafficPolicy=Local")
	}
	b.WriteString("\n")
	if len(pe.VirtualServers) == 0 {
		b.WriteString("    no virtual server on this node\n")
	}
	for _, v := range pe.VirtualServers {
		fmt.Fprintf(b, "    virtual server %s %s%s %s\n", v.VirtualServer, v.Scheduler, yesNo(v.Persistent, fmt.Sprintf(" persistent %ds", v.Timeout), ""),
			yesNo(v.InSync, "in sync", "NOT IN SYNC"))
		if v.Owner != "" {
			fmt.Fprintf(b, "      claimed by Service %s\n", v.Owner)
		}
		fmt.Fprintf(b, "      wanted:  %s\n", rsText(v.Desired))
		if v.Applied == nil {
			b.WriteString("      applied: (not in the kernel)\n")
		} else {
			fmt.Fprintf(b, "      applied: %s\n", rsText(v.Applied))
		}
		if v.KernelError != "" {
			fmt.Fprintf(b, "      kernel:  (%s)\n", v.KernelError)
		} else {
			fmt.Fprintf(b, "      kernel:  %s%s\n", rsText(v.Kernel), yesNo(v.KernelDiffers, "   KERNEL DIFFERS", ""))
		}
	}
	for _, e := range pe.Endpoints {
		fmt.Fprintf(b, "    endpoint %s %s local=%v ready=%v serving=%v terminating=%v: %s\n", e.Address,
			yesNo(e.Used, "IN", "OUT"), e.Local, e.Ready, e.Serving, e.Terminating, e.Why)
	}
	if pe.EndpointsTruncated {
		fmt.Fprintf(b, "    (more endpoints than the %d listed)\n", maxExplainEndpoints)
	}
}

func rsText(rss []RealServerExplain) string {
	if len(rss) == 0 {
		return "(none)"
	}
	parts := make([]string, 0, len(rss))
	for _, r := range rss {
		s := fmt.Sprintf("%s w%d", r.Address, r.Weight)
		if r.ActiveConn+r.InactiveConn > 0 {
			s += fmt.Sprintf(" conns %d/%d", r.ActiveConn, r.InactiveConn)
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, ", ")
}

func yesNo(b bool, yes, no string) string {
	if b {
		return yes
	}
	return no
}
