package iptables

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"regexp"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/ipvs/rules"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/ipset"
	utiliptables "github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/iptables"
)

// upstreamChains is every iptables chain upstream kube-proxy 1.37 creates in its
// ipvs and iptables modes (pkg/proxy/ipvs/proxier.go iptablesChains,
// pkg/proxy/iptables/proxier.go and its CleanupLeftovers), by table. --cleanup
// removes these and nothing else: other software uses the KUBE- prefix too
// (the kubelet's KUBE-FIREWALL and KUBE-KUBELET-CANARY, kube-router's
// KUBE-ROUTER-* and KUBE-NWPLCY-*, ...).
var upstreamChains = map[utiliptables.Table][]utiliptables.Chain{
	utiliptables.TableNAT: {
		chainServices,       // ipvs and iptables modes
		chainPostrouting,    // ipvs and iptables modes
		chainMarkMasq,       // ipvs and iptables modes
		chainNodePort,       // ipvs mode
		chainLoadBalancer,   // ipvs mode
		"KUBE-NODEPORTS",    // iptables mode
		"KUBE-PROXY-CANARY", // iptables mode: the rule-flush canary
	},
	utiliptables.TableFilter: {
		chainForward,             // ipvs and iptables modes
		chainProxyFirewall,       // ipvs and iptables modes
		chainNodePort,            // ipvs mode: health check node ports
		chainSourceRangesFW,      // ipvs mode
		chainIPVSFilter,          // ipvs mode
		chainIPVSOutFilter,       // ipvs mode
		"KUBE-SERVICES",          // iptables mode: REJECT for Services without endpoints
		"KUBE-EXTERNAL-SERVICES", // iptables mode
		"KUBE-NODEPORTS",         // iptables mode: health check node ports
		"KUBE-PROXY-CANARY",      // iptables mode
	},
	utiliptables.TableMangle: {
		"KUBE-PROXY-CANARY", // iptables mode
	},
}

// iptablesModeServiceChain matches the per-Service and per-endpoint chains of
// upstream's iptables mode: a fixed prefix and the first 16 characters of a
// base32-encoded SHA-256 (servicePortChainName, servicePortEndpointChainName, ...).
var iptablesModeServiceChain = regexp.MustCompile(`^KUBE-(SVC|SVL|EXT|FW|SEP)-[A-Z2-7]{16}$`)

// isKubeProxyChain says whether chain in table is one upstream kube-proxy (or this
// daemon) creates.
func isKubeProxyChain(table utiliptables.Table, chain string) bool {
	for _, c := range upstreamChains[table] {
		if string(c) == chain {
			return true
		}
	}
	return table == utiliptables.TableNAT && iptablesModeServiceChain.MatchString(chain)
}

// kubeProxySetNames is every ipset name upstream's ipvs mode creates, in both
// families (KUBE-6-* for IPv6), plus the temporary names this daemon uses while it
// replaces a set of the wrong type.
func kubeProxySetNames() sets.Set[string] {
	names := sets.New[string]()
	for _, s := range ipsetTable {
		for _, family := range []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol} {
			name := familySetName(s.name, family)
			names.Insert(name, ipset.TempName(name))
		}
	}
	return names
}

// cleanupTable removes, in one iptables-restore, kube-proxy's chains of table
// (isKubeProxyChain) and every rule of another chain that jumps to one of them.
func cleanupTable(ctx context.Context, ipt utiliptables.Interface, table utiliptables.Table) error {
	_, err := removeChains(ctx, ipt, table, func(chain string) bool { return isKubeProxyChain(table, chain) }, nil)
	return err
}

// removeChains removes, in one iptables-restore, the chains of table that
// isChain selects, every rule of another chain that jumps to one of them, and
// every rule isRule selects (a whole "-A CHAIN ..." line of iptables-save;
// isRule may be nil). It returns the chains it removed.
func removeChains(ctx context.Context, ipt utiliptables.Interface, table utiliptables.Table, isChain func(string) bool, isRule func(string) bool) ([]string, error) {
	var buf bytes.Buffer
	if err := ipt.SaveInto(ctx, table, &buf); err != nil {
		return nil, err
	}
	var chains []string
	var deletes []string
	sc := bufio.NewScanner(&buf)
	sc.Buffer(make([]byte, 1024*1024), 16*1024*1024)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, ":"):
			name := strings.Fields(line[1:])[0]
			if isChain(name) {
				chains = append(chains, name)
			}
		case strings.HasPrefix(line, "-A "):
			fields := strings.Fields(line)
			// Rules of the chains being removed go with them; any other chain (built-in
			// or someone else's) loses only its jumps into them.
			if len(fields) < 2 || isChain(fields[1]) {
				continue
			}
			if isChain(jumpTarget(fields)) || (isRule != nil && isRule(line)) {
				deletes = append(deletes, "-D"+line[2:])
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading iptables-save output: %w", err)
	}
	if len(chains) == 0 && len(deletes) == 0 {
		return nil, nil
	}
	var out bytes.Buffer
	fmt.Fprintf(&out, "*%s\n", table)
	for _, c := range chains {
		fmt.Fprintf(&out, ":%s - [0:0]\n", c) // declaring flushes it
	}
	for _, d := range deletes {
		out.WriteString(d + "\n")
	}
	for _, c := range chains {
		fmt.Fprintf(&out, "-X %s\n", c)
	}
	out.WriteString("COMMIT\n")
	if err := ipt.RestoreAll(ctx, out.Bytes(), utiliptables.NoFlushTables, utiliptables.NoRestoreCount); err != nil {
		return nil, err
	}
	return chains, nil
}

func jumpTarget(fields []string) string {
	for i := 0; i+1 < len(fields); i++ {
		if fields[i] == "-j" || fields[i] == "-g" {
			return fields[i+1]
		}
	}
	return ""
}

// The helpers --cleanup and the removal of upstream's iptables-mode leftovers share.

// CleanupTable removes kube-proxy's chains of table and the rules that jump to them.
func CleanupTable(ctx context.Context, ipt utiliptables.Interface, table utiliptables.Table) error {
	return cleanupTable(ctx, ipt, table)
}

// KubeProxySetNames is every ipset name upstream's ipvs mode creates, in both
// families, and the temporary names used while a set is replaced.
func KubeProxySetNames() sets.Set[string] { return kubeProxySetNames() }

// RemoveChains removes the chains of table that isChain selects, the jumps into
// them and the rules isRule selects; it returns the chains it removed.
func RemoveChains(ctx context.Context, ipt utiliptables.Interface, table utiliptables.Table, isChain, isRule func(string) bool) ([]string, error) {
	return removeChains(ctx, ipt, table, isChain, isRule)
}

// JumpTarget is the chain an iptables-save rule's fields jump to ("" for none).
func JumpTarget(fields []string) string { return jumpTarget(fields) }

// IsIPTablesModeServiceChain matches the per-Service and per-endpoint chains of
// upstream's iptables mode.
func IsIPTablesModeServiceChain(chain string) bool {
	return iptablesModeServiceChain.MatchString(chain)
}

// ChainProxyFirewall is the firewall chain upstream's iptables and ipvs modes share.
const ChainProxyFirewall = chainProxyFirewall

// FamilySetName is set's ipset name in family.
func FamilySetName(set rules.Set, family v1.IPFamily) string { return familySetName(set, family) }

// SetOfName is the set an ipset name of either family stands for.
func SetOfName(name string) (rules.Set, bool) {
	for _, s := range rules.Sets() {
		if familySetName(s, v1.IPv4Protocol) == name || familySetName(s, v1.IPv6Protocol) == name {
			return s, true
		}
	}
	return 0, false
}

// IPSetEntry is m as ipset prints it.
func IPSetEntry(m rules.Member) string { return ipsetEntry(m) }

// ParseIPSetEntry reads a member of set from the text ipset prints for it.
func ParseIPSetEntry(set rules.Set, text string) (rules.Member, error) {
	return parseIPSetEntry(set, text)
}

// SetSpecs are the create specs of every set of family.
func SetSpecs(family v1.IPFamily) []*ipset.Set { return setSpecs(family) }
