package ipvs

// A packet-flow tracer over the fake kernel state: it interprets the iptables rules the
// proxier wrote (the subset it writes), the ipsets, the addresses and the IPVS table,
// and answers where a packet goes. Tests describe flows as data and the tracer checks
// them, so a wrong rule order, a missing set member or a wrong real server all show.

import (
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/ipset"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/ipvs"
)

type packet struct {
	src, dst string
	port     int
	proto    string // tcp, udp, sctp
	// fromNode is a packet a node process sends (OUTPUT path), else it arrives from
	// outside or from a pod on a bridge (PREROUTING path; fromBridge marks the latter).
	fromNode   bool
	fromBridge bool
}

type verdict struct {
	// endpoints the packet may be sent to (every weight>0 real server), sorted; empty
	// with local=true when it is delivered to the node itself.
	endpoints  []string
	local      bool
	dropped    bool
	rejected   bool
	masquerade bool
}

func (v verdict) String() string {
	switch {
	case v.dropped:
		return "DROP"
	case v.rejected:
		return "REJECT"
	case v.local:
		return "LOCAL"
	}
	s := strings.Join(v.endpoints, ",")
	if s == "" {
		s = "NO-ENDPOINTS"
	}
	if v.masquerade {
		s += " masq"
	}
	return s
}

type tracer struct {
	t        *testing.T
	rules    map[string]map[string][][]string // table -> chain -> rules (args)
	sets     map[string]map[string]bool       // set -> members
	setTypes map[string]ipset.Type
	ipvs     []*ipvs.VirtualServer
	rs       map[string][]*ipvs.RealServer // vs key -> real servers
	local    map[string]bool               // addresses that are local (node + kube-ipvs0)
}

func newTracer(t *testing.T, iptablesSave string, sets map[string]*ipset.SetWithEntries, vsh ipvs.Interface, localAddrs []string) *tracer {
	t.Helper()
	tr := &tracer{t: t, rules: map[string]map[string][][]string{}, sets: map[string]map[string]bool{},
		setTypes: map[string]ipset.Type{}, rs: map[string][]*ipvs.RealServer{}, local: map[string]bool{}}
	table := ""
	for _, line := range strings.Split(iptablesSave, "\n") {
		line = strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, "*"):
			table = line[1:]
			if tr.rules[table] == nil {
				tr.rules[table] = map[string][][]string{}
			}
		case strings.HasPrefix(line, "-A "):
			f := splitRule(line)
			tr.rules[table][f[1]] = append(tr.rules[table][f[1]], f[2:])
		}
	}
	for name, s := range sets {
		m := map[string]bool{}
		for _, e := range s.Entries {
			m[e] = true
		}
		tr.sets[name] = m
		tr.setTypes[name] = s.Type
	}
	vss, err := vsh.GetVirtualServers(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, vs := range vss {
		tr.ipvs = append(tr.ipvs, vs)
		rss, err := vsh.GetRealServers(t.Context(), vs)
		if err != nil {
			t.Fatal(err)
		}
		tr.rs[vs.Key()] = rss
	}
	for _, a := range localAddrs {
		tr.local[a] = true
	}
	return tr
}

// splitRule splits an iptables-save line, keeping quoted comments whole.
func splitRule(line string) []string {
	var out []string
	var cur strings.Builder
	inQuote := false
	for _, r := range line {
		switch {
		case r == '"':
			inQuote = !inQuote
		case r == ' ' && !inQuote:
			if cur.Len() > 0 {
				out = append(out, cur.String())
				cur.Reset()
			}
		default:
			cur.WriteRune(r)
		}
	}
	if cur.Len() > 0 {
		out = append(out, cur.String())
	}
	return out
}

type pktState struct {
	p    packet
	mark bool
	// dstIP/dstPort after IPVS (for POSTROUTING set matches)
	dstIP   string
	dstPort int
}

// run evaluates a chain; it returns the terminal target ("ACCEPT", "DROP", "REJECT")
// or "" when the chain falls through / returns.
func (tr *tracer) run(table, chain string, st *pktState, depth int) string {
	if depth > 10 {
		tr.t.Fatalf("iptables chain loop at %s/%s", table, chain)
	}
	for _, r := range tr.rules[table][chain] {
		ok, target, targetArgs := tr.match(r, st)
		if !ok {
			continue
		}
		switch target {
		case "RETURN":
			return ""
		case "ACCEPT", "DROP", "REJECT":
			return target
		case "MASQUERADE":
			return "MASQUERADE"
		case "MARK":
			if len(targetArgs) >= 2 && targetArgs[0] == "--or-mark" {
				st.mark = true
			} else if len(targetArgs) >= 2 && targetArgs[0] == "--xor-mark" {
				st.mark = !st.mark
			}
		case "":
		default:
			if res := tr.run(table, target, st, depth+1); res != "" {
				return res
			}
		}
	}
	return ""
}

func (tr *tracer) match(r []string, st *pktState) (bool, string, []string) {
	p := st.p
	for i := 0; i < len(r); i++ {
		neg := false
		if r[i] == "!" {
			neg = true
			i++
		}
		switch r[i] {
		case "-s":
			i++
			if inCIDR(p.src, r[i]) == neg {
				return false, "", nil
			}
		case "-d":
			i++
			if inCIDR(st.dstIP, r[i]) == neg {
				return false, "", nil
			}
		case "-p":
			i++
			if (r[i] == p.proto) == neg {
				return false, "", nil
			}
		case "-j":
			return true, r[i+1], r[i+2:]
		case "-m":
			i++
			switch r[i] {
			case "comment":
				i += 2
			case "set":
				i++ // --match-set
				name, dirs := r[i+1], r[i+2]
				i += 2
				if tr.setMatch(name, dirs, st) == neg {
					return false, "", nil
				}
			case "addrtype":
				i++
				n := false
				if r[i] == "!" {
					n = true
					i++
				}
				kind, val := r[i], r[i+1]
				i++
				if val != "LOCAL" {
					tr.t.Fatalf("addrtype %s unsupported", val)
				}
				addr := st.dstIP
				if kind == "--src-type" {
					addr = p.src
				}
				isLocal := tr.local[addr] || strings.HasPrefix(addr, "127.")
				if isLocal == n {
					return false, "", nil
				}
			case "physdev":
				i++
				n := false
				if r[i] == "!" {
					n = true
					i++
				}
				if r[i] != "--physdev-is-in" {
					tr.t.Fatalf("physdev %s unsupported", r[i])
				}
				if p.fromBridge == n {
					return false, "", nil
				}
			case "mark":
				i++
				n := false
				if r[i] == "!" {
					n = true
					i++
				}
				i++ // --mark value
				if st.mark == n {
					return false, "", nil
				}
			case "conntrack":
				i += 2 // --ctstate X: every traced packet is NEW
				if !strings.Contains(r[i], "NEW") {
					return false, "", nil
				}
			case "ipvs":
				// -m ipvs --vaddr A --vproto P --vport N: the packet is IPVS-handled to A:N.
				vaddr, vproto, vport := "", "", ""
				for i+2 < len(r) && strings.HasPrefix(r[i+1], "--v") {
					switch r[i+1] {
					case "--vaddr":
						vaddr = r[i+2]
					case "--vproto":
						vproto = r[i+2]
					case "--vport":
						vport = r[i+2]
					}
					i += 2
				}
				if p.dst != vaddr || p.proto != vproto || strconv.Itoa(p.port) != vport || tr.findVS(p) == nil {
					return false, "", nil
				}
			default:
				tr.t.Fatalf("match module %s unsupported", r[i])
			}
		default:
			tr.t.Fatalf("rule argument %q unsupported in %v", r[i], r)
		}
	}
	return true, "", nil
}

func (tr *tracer) setMatch(name, dirs string, st *pktState) bool {
	members, ok := tr.sets[name]
	if !ok {
		tr.t.Fatalf("rule references missing set %s", name)
	}
	p := st.p
	addr := func(d string) string {
		if d == "src" {
			return p.src
		}
		return st.dstIP
	}
	port := func(d string) int {
		if d == "src" {
			return 0
		}
		return st.dstPort
	}
	ds := strings.Split(dirs, ",")
	var key string
	switch tr.setTypes[name] {
	case ipset.BitmapPort:
		key = strconv.Itoa(port(ds[0]))
	case ipset.HashIP:
		key = addr(ds[0])
	case ipset.HashIPPort:
		key = fmt.Sprintf("%s,%s:%d", addr(ds[0]), p.proto, port(ds[1]))
	case ipset.HashIPPortIP:
		key = fmt.Sprintf("%s,%s:%d,%s", addr(ds[0]), p.proto, port(ds[1]), addr(ds[2]))
	case ipset.HashIPPortNet:
		prefix := fmt.Sprintf("%s,%s:%d,", addr(ds[0]), p.proto, port(ds[1]))
		for m := range members {
			if strings.HasPrefix(m, prefix) && inCIDR(addr(ds[2]), strings.TrimPrefix(m, prefix)) {
				return true
			}
		}
		return false
	}
	return members[key]
}

func inCIDR(ip, cidr string) bool {
	if !strings.Contains(cidr, "/") {
		return net.ParseIP(ip).Equal(net.ParseIP(cidr))
	}
	_, n, err := net.ParseCIDR(cidr)
	return err == nil && n.Contains(net.ParseIP(ip))
}

func (tr *tracer) findVS(p packet) *ipvs.VirtualServer {
	for _, vs := range tr.ipvs {
		if vs.Address.String() == p.dst && int(vs.Port) == p.port && strings.EqualFold(vs.Protocol, p.proto) {
			return vs
		}
	}
	return nil
}

// trace follows a packet through nat (PREROUTING/OUTPUT), filter (INPUT/OUTPUT), IPVS
// and nat POSTROUTING.
func (tr *tracer) trace(p packet) verdict {
	st := &pktState{p: p, dstIP: p.dst, dstPort: p.port}
	natChain, filterChain := "PREROUTING", "INPUT"
	if p.fromNode {
		natChain, filterChain = "OUTPUT", "OUTPUT"
	}
	// The built-in chains hold only the jump rules the proxier ensured, in their order.
	tr.run("nat", natChain, st, 0)
	res := tr.run("filter", filterChain, st, 0)
	if res == "ACCEPT" {
		res = ""
	}
	switch res {
	case "DROP":
		return verdict{dropped: true}
	case "REJECT":
		return verdict{rejected: true}
	}
	return tr.throughIPVS(st, func(st *pktState) bool { return tr.run("nat", "KUBE-POSTROUTING", st, 0) == "MASQUERADE" })
}

// throughIPVS finishes a trace that the filter rules let through: the packet goes to
// IPVS's live real servers (or to the node when no virtual server has it), and
// masq says, for the packet on its way to each real server, whether postrouting
// masquerades it.
func (tr *tracer) throughIPVS(st *pktState, masq func(st *pktState) bool) verdict {
	p := st.p
	vs := tr.findVS(p)
	if vs == nil {
		return verdict{local: tr.local[p.dst]}
	}
	var v verdict
	for _, rs := range tr.rs[vs.Key()] {
		if rs.Weight == 0 {
			continue
		}
		v.endpoints = append(v.endpoints, rs.Key())
		st2 := *st
		st2.dstIP, st2.dstPort = rs.Address.String(), int(rs.Port)
		if masq(&st2) {
			v.masquerade = true
		}
	}
	sort.Strings(v.endpoints)
	return v
}
