package app

import (
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/iptables"
)

// familyTools are the iptables binaries the proxier of one family runs with the
// mode backend: iptables-nft (jump rules), iptables-nft-restore (our chains) and
// iptables-nft-save (backend detection, --cleanup); ip6tables-* for IPv6.
func familyTools(mode iptables.Mode, family v1.IPFamily) []string {
	base := "iptables"
	if family == v1.IPv6Protocol {
		base = "ip6tables"
	}
	bin := base + "-" + string(mode)
	return []string{bin, bin + "-restore", bin + "-save"}
}

// missingTools returns the names lookPath cannot find.
func missingTools(names []string, lookPath func(string) (string, error)) []string {
	var missing []string
	for _, n := range names {
		if _, err := lookPath(n); err != nil {
			missing = append(missing, n)
		}
	}
	return missing
}

// checkTools verifies at start that the binaries the proxier runs exist, so a
// missing package is one clear error instead of a failure on every sync. ipset
// and the primary family's iptables binaries are required; a secondary family
// whose ip6tables (or iptables) binaries are missing is dropped with a log line,
// as upstream runs single-stack when the other family has no iptables. It
// returns the families to run.
func checkTools(logger klog.Logger, families []v1.IPFamily, mode iptables.Mode, lookPath func(string) (string, error)) ([]v1.IPFamily, error) {
	required := append([]string{"ipset"}, familyTools(mode, families[0])...)
	if missing := missingTools(required, lookPath); len(missing) > 0 {
		return nil, fmt.Errorf("required tools not found in $PATH: %s (the ipvs mode needs ipset and the iptables %s backend's binaries for %s)",
			strings.Join(missing, ", "), mode, families[0])
	}
	out := []v1.IPFamily{families[0]}
	for _, family := range families[1:] {
		if missing := missingTools(familyTools(mode, family), lookPath); len(missing) > 0 {
			logger.Info("No iptables support for family; running single-stack", "ipFamily", family, "missing", missing)
			continue
		}
		out = append(out, family)
	}
	return out, nil
}
