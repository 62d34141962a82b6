package ipvs

import (
	"fmt"
	"net"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/types"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/ipvs/rules"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/ipvs"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/netlink"
)

// A sync is observe (full syncs only) -> plan -> execute. The plan is a value: the
// ordered kernel writes that make the touched keys of the applied state match the
// desired index, each tagged with the Service that wants it. It is built by a pure
// function (planSync) so that it can be printed, compared and tested without a kernel;
// execute.go carries it out and records each write's outcome.

// syncPlan is what a sync writes, in the order it is written: every write to the
// kernel is a step of a plan, and Proxier.run, which carries plans out, is the only
// code that writes. A sync's main plan writes set members first (so the rules that
// match them never miss), then new addresses, the rules, IPVS, and last the
// addresses nobody wants any more and the draining real servers whose time is up.
// Smaller plans keep the rules on (rules.KeepAlive), prepare the rules backend's
// sets before a full sync plans, and remove what other backends and modes left.
type syncPlan struct {
	full  bool
	steps []step
}

// step is one step of a plan: a rules backend's step (a rules.Step) or one of the
// kinds below. String prints it, one line per write.
type step interface{ String() string }

// deviceStep makes sure kube-ipvs0 exists (full syncs, before any bind).
type deviceStep struct{}

func (deviceStep) String() string { return "device " + netlink.DefaultDummyDevice + "\n" }

// bindStep binds addresses to kube-ipvs0.
type bindStep struct{ addrs []string }

// ipvsStep writes virtual servers (sorted by key), and quiet the addresses whose
// scheduler changes: their refusals are held back while IPVS is written.
type ipvsStep struct{ vs []vsPlan }

// unbindStep removes addresses from kube-ipvs0.
type unbindStep struct{ addrs []string }

// drainStep removes the draining real servers whose connections ended or whose
// time is up (drain.go).
type drainStep struct{ n int }

// removeStep removes what upstream's other modes (leftovers.go) and the other
// rules backends left of this family (cleanup_beside.go); its run records whether
// everything of each went.
type removeStep struct {
	leftovers, otherBackends bool
	leftoversOK, otherOK     bool
}

func (s bindStep) String() string   { return lines("bind ", s.addrs) }
func (s unbindStep) String() string { return lines("unbind ", s.addrs) }
func (s drainStep) String() string  { return fmt.Sprintf("drain-check %d real servers\n", s.n) }

func (s *removeStep) String() string {
	var b strings.Builder
	if s.leftovers {
		b.WriteString("remove upstream's iptables- and nftables-mode leftovers\n")
	}
	if s.otherBackends {
		b.WriteString("remove the other rules backends' objects\n")
	}
	return b.String()
}

func lines(prefix string, items []string) string {
	var b strings.Builder
	for _, it := range items {
		b.WriteString(prefix + it + "\n")
	}
	return b.String()
}

type vsAction uint8

const (
	vsKeep   vsAction = iota // the virtual server itself is right; maybe its real servers are not
	vsCreate                 // add it (taking over one someone else made since we looked)
	vsUpdate                 // change scheduler, flags or timeout in place
	vsDelete                 // no Service wants it
)

type rsAction uint8

const (
	rsKeep         rsAction = iota // right as it is
	rsAdd                          // wanted, missing
	rsSetWeight                    // present with another weight
	rsKeepDraining                 // unwanted, draining at weight 0 until its deadline
	rsDrain                        // unwanted TCP real server with traffic: weight 0, start draining
	rsDelete                       // unwanted: remove
	rsLeave                        // unwanted by a warm sync's partial view: left as it is (warm.go)
)

// rsStep is one real server of a planned virtual server; have is its applied value,
// want its desired one (zero when absent).
type rsStep struct {
	action rsAction
	have   desiredRS
	want   desiredRS
	// readd: the real server is deleted and added again (at its weight after the
	// step) so that the kernel's list stays in key order (keepListOrder).
	readd bool
}

// weightAfter is the real server's weight once the step is done.
func (s rsStep) weightAfter() int32 {
	if s.action == rsLeave {
		return s.have.weight
	}
	if s.action == rsDrain || s.action == rsKeepDraining || s.action == rsDelete {
		return 0
	}
	return s.want.weight
}

// key is the real server the step is about.
func (s rsStep) key() rsKey {
	if s.action == rsAdd || s.action == rsKeep || s.action == rsSetWeight {
		return s.want.key
	}
	return s.have.key
}

// vsPlan is the work on one virtual server. steps lists adds and weight changes before
// any drain or removal, so a Service whose only endpoint is replaced is never left
// without one.
type vsPlan struct {
	key    vsKey
	action vsAction
	// spec is the desired virtual server (create, update, keep) or the applied one
	// (delete).
	spec *ipvs.VirtualServer
	// owner is the Service whose desired state holds it (zero for a delete).
	owner   types.NamespacedName
	desired *desiredVS
	steps   []rsStep
	// share says the applied real servers equal the desired ones: nothing is written,
	// the applied state just takes the desired list (and drains of wanted keys end).
	share bool
}

// planInput is everything planSync reads. It is not changed.
type planInput struct {
	full    bool
	index   *desiredIndex
	applied *appliedState
	touched *touched
	// rules is the text of the rules with the out filter out.
	rules []byte
	out   []rules.OutFilter
	// rulesChecked: the chains were checked beside the loop (rules_beside.go).
	rulesChecked bool
	// draining reports whether a real server is draining (weight 0, deadline set).
	draining func(drainKey) bool
	// drains counts the draining real servers (a drain check ends the plan).
	drains int
	// drainTerminating: TCP real servers with traffic drain at weight 0 instead of
	// being deleted at once (off on kernels where conn_reuse_mode makes that unsafe).
	drainTerminating bool
	excluded         func(net.IP) bool
	// warm: the lists are not complete yet (warm.go): the plan only adds and
	// changes, and removes nothing.
	warm bool
}

// planSync computes the writes for the touched keys. It does no I/O.
func planSync(in *planInput) *syncPlan {
	pl := &syncPlan{full: in.full}
	a, ix, t := in.applied, in.index, in.touched
	if in.full {
		pl.steps = append(pl.steps, deviceStep{})
	}

	var changes []rules.Change
	for e := range t.entries {
		want, have := ix.hasEntry(e), a.entries.Has(e)
		if want != have && (want || !in.warm) {
			changes = append(changes, rules.Change{Member: e, Add: want})
		}
	}
	// Deterministic order (the kernel does not care; tests and logs do).
	slices.SortFunc(changes, compareSetChanges)
	if len(changes) > 0 || in.full {
		pl.steps = append(pl.steps, rules.Members{Changes: changes, Full: in.full && !in.warm})
	}

	var binds, unbinds []string
	for addr := range t.addrs {
		want, have := ix.hasAddr(addr), a.addrs.Has(addr)
		switch {
		case want && !have:
			binds = append(binds, addr)
		case !want && have:
			unbinds = append(unbinds, addr)
		}
	}
	slices.Sort(binds)
	slices.Sort(unbinds)
	if len(binds) > 0 {
		pl.steps = append(pl.steps, bindStep{binds})
	}

	// The rules are rewritten whole, but only when their text changes (or on a full
	// sync, which also repairs tampering). A warm sync leaves them as they are: which
	// rules there are depends on the Services, and some are not listed yet; the first
	// sync after the lists are complete writes them.
	if !in.warm && (in.full && !in.rulesChecked || string(in.rules) != string(a.iptables)) {
		pl.steps = append(pl.steps, rules.Rules{Out: in.out, Text: in.rules})
	}
	if in.full && !in.rulesChecked && !in.warm {
		// The jumps need the rules (and turn the nftables backend's on).
		pl.steps = append(pl.steps, rules.Jumps{})
	}

	var vs []vsPlan
	var quiet []string
	keys := t.vs.UnsortedList()
	slices.SortFunc(keys, compareVSKeys)
	for _, k := range keys {
		if vp, ok := planVirtualServer(in, k); ok {
			vs = append(vs, vp)
			if vp.action == vsUpdate && in.applied.vs[k].vs.Scheduler != vp.spec.Scheduler {
				quiet = append(quiet, keyAddrString(k.addr))
			}
		}
	}
	slices.Sort(quiet)
	quiet = slices.Compact(quiet)
	if len(quiet) > 0 {
		pl.steps = append(pl.steps, rules.Quiet{Addrs: quiet})
	}
	if len(vs) > 0 {
		pl.steps = append(pl.steps, ipvsStep{vs})
	}
	if len(quiet) > 0 {
		pl.steps = append(pl.steps, rules.Loud{Addrs: quiet})
	}
	if len(unbinds) > 0 && !in.warm {
		pl.steps = append(pl.steps, unbindStep{unbinds})
	}
	if in.warm {
		return pl
	}
	// Real servers this plan starts draining are checked at its end too: one with no
	// connection goes at once.
	drains := in.drains
	for _, vp := range vs {
		for _, st := range vp.steps {
			if st.action == rsDrain {
				drains++
			}
		}
	}
	if drains > 0 {
		pl.steps = append(pl.steps, drainStep{drains})
	}
	return pl
}

// planVirtualServer plans one virtual server; ok is false when nothing is to be done.
func planVirtualServer(in *planInput, key vsKey) (vsPlan, bool) {
	d := in.index.virtualServer(key)
	a := in.applied.vs[key]
	switch {
	case d == nil && a == nil, d == nil && in.warm:
		return vsPlan{}, false
	case d == nil:
		return vsPlan{key: key, action: vsDelete, spec: a.vs}, true
	case in.excluded(d.vs.Address):
		return vsPlan{}, false
	}
	vp := vsPlan{key: key, spec: d.vs, owner: d.owner(), desired: d}
	var have []desiredRS
	switch {
	case a == nil:
		vp.action = vsCreate
	case !a.vs.Equal(d.vs):
		vp.action = vsUpdate
		have = a.rs
	default:
		have = a.rs
		if sameList(have, d.realServers) {
			// The usual case of a full sync: nothing to write.
			return vsPlan{}, false
		}
	}
	if a != nil && slices.Equal(have, d.realServers) {
		vp.share = true
		return vp, true
	}

	// Walk both sorted lists: desired only -> add, both -> fix the weight, applied only
	// -> stale, planned after every add.
	want := d.realServers
	var stale []rsStep
	for len(have) > 0 || len(want) > 0 {
		c := 0
		switch {
		case len(have) == 0:
			c = 1
		case len(want) == 0:
			c = -1
		default:
			c = compareRSKeys(have[0].key, want[0].key)
		}
		switch {
		case c < 0:
			h := have[0]
			have = have[1:]
			stale = append(stale, planStale(in, key, a.vs, h))
		case c > 0:
			vp.steps = append(vp.steps, rsStep{action: rsAdd, want: want[0]})
			want = want[1:]
		default:
			s := rsStep{action: rsKeep, have: have[0], want: want[0]}
			if s.have.weight != s.want.weight {
				s.action = rsSetWeight
			}
			vp.steps = append(vp.steps, s)
			have, want = have[1:], want[1:]
		}
	}
	if in.warm {
		// Nothing goes before the lists are complete; nor is a list order restored,
		// which takes real servers out and in again.
		writes := vp.action != vsKeep
		for _, st := range vp.steps {
			writes = writes || st.action != rsKeep
		}
		for _, st := range stale {
			vp.steps = append(vp.steps, rsStep{action: rsLeave, have: st.have})
		}
		return vp, writes
	}
	if orderSensitive(d.vs.Scheduler) && a != nil {
		vp.steps = keepListOrder(vp.steps, stale, vp.action == vsUpdate && a.vs.Scheduler != d.vs.Scheduler)
		return vp, true
	}
	vp.steps = append(vp.steps, stale...)
	return vp, true
}

// orderSensitive reports whether a scheduler's choice depends on the order of the
// kernel's list of real servers: sh hands out its buckets walking the list, and mh
// (Maglev) fills its table walking it, the earlier real server winning a contested
// slot. The kernel adds a real server at the head of that list, so two nodes that
// added the same real servers in another order (one synced two additions at once,
// the other one by one; one was down) would send a client to different pods.
func orderSensitive(scheduler string) bool { return scheduler == "mh" || scheduler == "sh" }

// keepListOrder makes the kernel's list of an order-sensitive virtual server the one
// adding every real server in key order gives, whatever the history: a new real
// server goes to the head of the list, so every present one whose key sorts after the
// smallest new key (all of them when the scheduler just became order-sensitive) is
// deleted and added again, in key order, right after; except, when the plan is
// carried out, one with an established connection (keepBusyInPlace). A real server
// draining at weight 0 that is added again comes back at weight 0, which takes it out
// of the table (the kernel keeps a drained real server's slots by its last non-zero
// weight, one re-added at 0 has none), as on a node that already deleted it. steps
// are in key order (the walk of planVirtualServer); stale follow, except the re-added
// ones.
func keepListOrder(steps, stale []rsStep, all bool) []rsStep {
	var first *rsKey
	for i := range steps {
		if steps[i].action == rsAdd {
			first = &steps[i].want.key
			break
		}
	}
	if first == nil && !all {
		return append(steps, stale...)
	}
	after := func(k rsKey) bool { return all || compareRSKeys(k, *first) > 0 }
	for i := range steps {
		if steps[i].action != rsAdd && after(steps[i].key()) {
			steps[i].readd = true
		}
	}
	var rest []rsStep
	for _, st := range stale {
		if (st.action == rsDrain || st.action == rsKeepDraining) && after(st.key()) {
			st.readd = true
			steps = append(steps, st)
			continue
		}
		rest = append(rest, st)
	}
	slices.SortStableFunc(steps, func(x, y rsStep) int { return compareRSKeys(x.key(), y.key()) })
	return append(steps, rest...)
}

// planStale decides what happens to a real server no Service wants on this virtual
// server. TCP real servers that still serve traffic drain at weight 0; one already at
// weight 0 was terminating and its pod is now gone, and UDP/SCTP real servers go at once
// (kubernetes#71514: a weight-0 UDP destination keeps receiving a client's datagrams
// until its IPVS entry expires).
func planStale(in *planInput, key vsKey, vs *ipvs.VirtualServer, h desiredRS) rsStep {
	switch {
	case in.draining(drainKey{key, h.key}):
		return rsStep{action: rsKeepDraining, have: h}
	case vs.Protocol == ipvs.TCP && in.drainTerminating && h.weight > 0:
		return rsStep{action: rsDrain, have: h}
	default:
		return rsStep{action: rsDelete, have: h}
	}
}

// sameList reports whether two real server lists are the same slice (the applied state
// shares the desired list once they match), without comparing elements.
func sameList(a, b []desiredRS) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

func compareSetChanges(x, y rules.Change) int { return rules.Compare(x.Member, y.Member) }

// String prints the plan, one write per line, for V(4) logs and tests.
func (pl *syncPlan) String() string {
	var b strings.Builder
	for _, s := range pl.steps {
		if m, ok := s.(rules.Members); ok {
			// One line per member (the step's own String only counts them).
			for _, c := range m.Changes {
				fmt.Fprintf(&b, "%s\n", c)
			}
			continue
		}
		if q, ok := s.(rules.Quiet); ok {
			for _, a := range q.Addrs {
				fmt.Fprintf(&b, "quiet %s while schedulers change\n", a)
			}
			continue
		}
		if l, ok := s.(rules.Loud); ok {
			for _, a := range l.Addrs {
				fmt.Fprintf(&b, "loud %s\n", a)
			}
			continue
		}
		text := s.String()
		b.WriteString(text)
		if text != "" && !strings.HasSuffix(text, "\n") {
			b.WriteByte('\n')
		}
	}
	return b.String()
}

func (s ipvsStep) String() string {
	var b strings.Builder
	for _, vp := range s.vs {
		owner := ""
		if vp.owner.Name != "" {
			owner = " (" + vp.owner.String() + ")"
		}
		switch vp.action {
		case vsCreate:
			fmt.Fprintf(&b, "ipvs add %s %s%s\n", vp.key, vp.spec.Scheduler, owner)
		case vsUpdate:
			fmt.Fprintf(&b, "ipvs update %s %s%s\n", vp.key, vp.spec.Scheduler, owner)
		case vsDelete:
			fmt.Fprintf(&b, "ipvs delete %s\n", vp.key)
		}
		for _, st := range vp.steps {
			if st.readd {
				note := ""
				if st.action == rsDrain || st.action == rsKeepDraining {
					note = " (draining)"
				}
				fmt.Fprintf(&b, "ipvs %s re-add-rs %s weight %d%s%s\n", vp.key, st.key(), st.weightAfter(), note, owner)
				continue
			}
			switch st.action {
			case rsAdd:
				fmt.Fprintf(&b, "ipvs %s add-rs %s weight %d%s\n", vp.key, st.want.key, st.want.weight, owner)
			case rsSetWeight:
				fmt.Fprintf(&b, "ipvs %s weight %s %d -> %d%s\n", vp.key, st.want.key, st.have.weight, st.want.weight, owner)
			case rsDrain:
				fmt.Fprintf(&b, "ipvs %s drain-rs %s%s\n", vp.key, st.have.key, owner)
			case rsDelete:
				fmt.Fprintf(&b, "ipvs %s del-rs %s%s\n", vp.key, st.have.key, owner)
			case rsLeave:
				fmt.Fprintf(&b, "ipvs %s leave-rs %s until the lists are complete%s\n", vp.key, st.have.key, owner)
			}
		}
	}
	return b.String()
}

// writes counts the kernel writes the plan holds (for logs).
func (pl *syncPlan) writes() int {
	n := 0
	for _, s := range pl.steps {
		switch s := s.(type) {
		case rules.Members:
			if len(s.Changes) > 0 {
				n++
			}
		case bindStep:
			n += len(s.addrs)
		case unbindStep:
			n += len(s.addrs)
		case ipvsStep:
			for _, vp := range s.vs {
				if vp.action != vsKeep {
					n++
				}
				for _, st := range vp.steps {
					if st.action != rsKeep && st.action != rsKeepDraining && st.action != rsLeave {
						n++
					}
					if st.readd {
						n += 2
					}
				}
			}
		case rules.Rules:
			n++
		}
	}
	return n
}
