package nftables

import (
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/ipvs/rules"
	nft "github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/nftables"
)

// ungated walks a programme from every base chain, as packets go, and returns
// the rules a packet reaches without having passed its chain's gate (in a regular
// chain, the gate of a chain that jumped there).
func ungated(p *nftProgramme, f nftFamily) []string {
	gate := f.nftGate().String()
	var out []string
	var walk func(chain string, gated bool, depth int)
	walk = func(chain string, gated bool, depth int) {
		if depth > 10 {
			out = append(out, "a jump loop at "+chain)
			return
		}
		for i, r := range p.rules[chain] {
			if r.String() == gate {
				gated = true
				continue
			}
			if !gated {
				out = append(out, fmt.Sprintf("%s rule %d: %s", chain, i, r))
			}
			for _, s := range r.Stmts {
				if v, ok := s.(nft.Verdict); ok && (v.Kind == nft.Jump || v.Kind == nft.Goto) {
					walk(v.Chain, gated, depth+1)
				}
			}
		}
	}
	for _, c := range p.chains {
		if c.Hook != "" {
			walk(c.Name, false, 0)
		}
	}
	return out
}

// TestNFTGateBeforeEveryRule: whatever the configuration, no rule of the programme
// that rejects, drops, marks, masquerades or accepts (nor any other) is reached by a
// packet that has not passed the family's gate, the first rule of every base
// chain; and the regular chains are reached only through base chains.
func TestNFTGateBeforeEveryRule(t *testing.T) {
	inputs := nftProgrammeInputs()
	inputs = append(inputs,
		&programmeInput{cfg: rules.Config{Family: v1.IPv4Protocol, MasqueradeMark: "0x004000", MasqueradeAll: true}},
		&programmeInput{cfg: rules.Config{Family: v1.IPv4Protocol, MasqueradeMark: "0x004000"}},
		&programmeInput{cfg: rules.Config{Family: v1.IPv6Protocol, MasqueradeMark: "0x004000", LocalDetectorArgs: []string{"!", "-s", "fd00:10:244::/48"}},
			out: []rules.OutFilter{outFilter("fd00:192::10", rules.UDP, 53)}})
	for _, in := range inputs {
		p, err := buildNFTProgramme(in)
		if err != nil {
			t.Fatal(err)
		}
		f := newNFTFamily(in.cfg.Family)
		if u := ungated(p, f); len(u) > 0 {
			t.Errorf("%s: rules reached without the gate:\n%s", in.cfg.Family, strings.Join(u, "\n"))
		}
		reached := map[string]bool{}
		acting := 0
		for _, c := range p.chains {
			rules := p.rules[c.Name]
			if c.Hook != "" && (len(rules) == 0 || rules[0].String() != f.nftGate().String()) {
				t.Errorf("%s: base chain %s does not begin with the gate: %v", in.cfg.Family, c.Name, rules)
			}
			for _, r := range rules {
				for _, s := range r.Stmts {
					switch s := s.(type) {
					case nft.Verdict:
						reached[s.Chain] = true
						if s.Kind == nft.Drop {
							acting++
						}
					case nft.Reject, nft.Masquerade, nft.MarkSet:
						acting++
					}
				}
			}
		}
		for _, c := range p.chains {
			if c.Hook == "" && !reached[c.Name] {
				t.Errorf("%s: chain %s is reached by no jump", in.cfg.Family, c.Name)
			}
		}
		if acting < 6 {
			t.Errorf("%s: only %d rules drop, reject, mark or masquerade: the walk proves little", in.cfg.Family, acting)
		}
	}

	// The walk sees a missing gate.
	p, err := buildNFTProgramme(inputs[0])
	if err != nil {
		t.Fatal(err)
	}
	f := newNFTFamily(v1.IPv4Protocol)
	p.rules[f.name("filter-input")] = p.rules[f.name("filter-input")][1:]
	u := ungated(p, f)
	if len(u) == 0 || !strings.Contains(strings.Join(u, "\n"), "ip-ipvs-filter rule 5: ct state new ip daddr @ip-ipvs-ips reject") {
		t.Errorf("without the input chain's gate the walk found only:\n%s", strings.Join(u, "\n"))
	}
}

// TestNFTLivenessTimeout: the liveness is three sync periods, at least two
// minutes, unless the environment sets it (at least a second).
func TestNFTLivenessTimeout(t *testing.T) {
	for _, c := range []struct {
		env        string
		syncPeriod time.Duration
		want       time.Duration
		bad        bool
	}{
		{syncPeriod: 30 * time.Second, want: 2 * time.Minute},
		{syncPeriod: 10 * time.Second, want: 2 * time.Minute},
		{syncPeriod: 5 * time.Minute, want: 15 * time.Minute},
		{env: "20s", syncPeriod: 30 * time.Second, want: 20 * time.Second},
		{env: "1s", syncPeriod: time.Hour, want: time.Second},
		{env: "999ms", bad: true},
		{env: "0", bad: true},
		{env: "-5s", bad: true},
		{env: "soon", bad: true},
	} {
		t.Setenv(EnvNFTLivenessTimeout, c.env)
		got, fromEnv, err := nftLiveness(c.syncPeriod)
		if (err != nil) != c.bad || got != c.want || fromEnv != (c.env != "" && !c.bad) {
			t.Errorf("%s=%q, syncPeriod %v: got %v (from the environment: %v), %v; want %v (an error: %v)",
				EnvNFTLivenessTimeout, c.env, c.syncPeriod, got, fromEnv, err, c.want, c.bad)
		}
	}
}
