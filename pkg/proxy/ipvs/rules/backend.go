package rules

import (
	"context"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/ipset"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/iptables"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/nftables"
)

// A rules backend writes what IPVS needs beside it: the sets of service addresses and
// ports and the rules that masquerade, filter and accept service traffic. The proxier
// plans; a backend carries out the plan's rule steps (Apply) and says, object by
// object, what the kernel refused (Outcome). Adding a backend is a package that
// implements Backend and one line in the proxier's list of registrations.

// Backend writes the sets and rules of one IP family.
type Backend interface {
	// Name is the value of --ipvs-rules-backend that selects it.
	Name() string
	// Observe returns the reading of the members the kernel's sets hold. It is
	// called in the sync loop; the reading may run beside it. check, when not nil,
	// is the rules' text last written: a backend may check it against the kernel as
	// it reads, and repair it (Observed.RulesChecked).
	Observe(check []byte) ReadFunc
	// Adopt takes a reading as what the kernel holds: the sync that uses it calls it.
	// What the backend wrote since the reading began stays as written.
	Adopt(o *Observed)
	// Text is what the rules are with the out filter out, given the desired state.
	// The plan writes them when it differs from what was last written.
	Text(d Desired, out []OutFilter) []byte
	// Apply carries out one rule step of a plan. A member or rule the kernel
	// refuses is reported in out, and the rest is written; the error is for a
	// failure no object explains.
	Apply(ctx context.Context, d Desired, s Step, c Counter, out *Outcome) error
	// Remove removes every object of this backend and family (the node switched
	// backends): done reports whether nothing is left.
	Remove(ctx context.Context, c Counter) (done bool, err error)
	// RemovalsBeside says whether removing the other backends' objects and
	// upstream's leftovers may run beside the sync loop: they touch nothing this
	// backend writes.
	RemovalsBeside() bool
}

// ReadFunc reads the kernel's sets.
type ReadFunc func(ctx context.Context, c Counter) (*Observed, error)

// Config is what a backend depends on besides the Services, fixed for its life.
type Config struct {
	Family        v1.IPFamily
	MasqueradeAll bool
	// MasqueradeMark is the mark bit's value, as upstream prints it ("0x004000").
	MasqueradeMark string
	// LocalDetectorArgs are iptables match arguments selecting traffic that does
	// NOT come from a local pod ("!", "-s", CIDR); empty when undetectable.
	LocalDetectorArgs []string
	SyncPeriod        time.Duration
	Logger            klog.Logger
	Clock             clock.Clock
}

// Kernel holds the kernel interfaces backends write through; a backend uses those
// it needs, and is not made when one of them is missing.
type Kernel struct {
	IPSet    ipset.Interface
	IPTables iptables.Interface
	// NFTRules is the nftables backend's table; NFTReader, if set, the same table on
	// a socket of its own for the reads beside the loop.
	NFTRules  nftables.Ruleset
	NFTReader nftables.Ruleset
}

// Registration makes a backend by name.
type Registration struct {
	Name string
	// New makes the backend; ErrUnavailable when k lacks what it writes through.
	New func(cfg Config, k Kernel) (Backend, error)
}

// ErrUnavailable says a backend cannot be made: the kernel interfaces it writes
// through are missing.
var ErrUnavailable = fmt.Errorf("rules backend unavailable")

// Desired is what a backend reads of the desired state.
type Desired interface {
	// SetSize is how many distinct members s wants.
	SetSize(s Set) int
	// Members are the members s wants, sorted.
	Members(s Set) []Member
	// SourceRanges are the source-range members of one LoadBalancer port, sorted.
	SourceRanges(p ServicePort) []Member
	// SourceRangePorts are the LoadBalancer ports with source ranges.
	SourceRangePorts() []ServicePort
}

// Counter counts what a backend sends to the kernel, for the sync's statistics and
// kubeproxy_ipvs_kernel_operations_total (subsystem and operation are its labels).
type Counter interface {
	Request(subsystem, operation string)
	// Wrote counts n set members written by subsystem.
	Wrote(subsystem string, n int)
	// RulesWritten says the rules were written.
	RulesWritten()
}

// Observed is a reading of the kernel's sets.
type Observed struct {
	Members sets.Set[Member]
	// RulesChecked: the rules given to Observe were found as written.
	RulesChecked bool
	// Repair: they were not; a Repair step beside the loop writes them again.
	Repair bool
	// Private is the backend's own part of the reading, for Adopt.
	Private any
}

// Step is one rule step of a plan.
type Step interface {
	fmt.Stringer
	step()
}

// KeepAlive renews whatever keeps the rules on while the daemon runs. Every run of
// the sync loop begins with it.
type KeepAlive struct{}

// Prepare makes the sets and rules exist as they must (full syncs), pointing the
// rules at sets it replaces with the out filter Out.
type Prepare struct{ Out []OutFilter }

// Grow makes room in the sets for the members a partial sync is about to write.
type Grow struct{}

// Members writes member changes; Full says a full sync writes them, which also
// removes what no member stands for.
type Members struct {
	Changes []Change
	Full    bool
}

// Rules writes the rules with the out filter Out, whose text is Text.
type Rules struct {
	Out  []OutFilter
	Text []byte
}

// Jumps makes sure packets reach the rules (full syncs whose rules were not
// checked beside the loop).
type Jumps struct{}

// Repair writes the rules Text again beside the sync loop, after a reading (Observe)
// found them tampered with or not yet checked, unless the loop has written them
// since.
type Repair struct {
	Text    []byte
	Reading *Observed
}

// Quiet holds back the kernel's refusals from Addrs while their virtual servers'
// schedulers change; Loud ends it.
type Quiet struct{ Addrs []string }

// Loud ends a Quiet of Addrs.
type Loud struct{ Addrs []string }

// EndQuiet takes Addrs out of a quiet that lingered after Loud (Outcome.Later).
type EndQuiet struct{ Addrs []string }

// Change adds or deletes one member.
type Change struct {
	Member Member
	Add    bool
}

func (KeepAlive) step() {}
func (Prepare) step()   {}
func (Grow) step()      {}
func (Members) step()   {}
func (Rules) step()     {}
func (Jumps) step()     {}
func (Quiet) step()     {}
func (Loud) step()      {}
func (Repair) step()    {}
func (EndQuiet) step()  {}

func (KeepAlive) String() string { return "rules keep-alive" }
func (Prepare) String() string   { return "rules prepare" }
func (Grow) String() string      { return "sets grow" }
func (s Members) String() string { return fmt.Sprintf("set members (%d changes)", len(s.Changes)) }
func (s Rules) String() string   { return fmt.Sprintf("rules (%d bytes)", len(s.Text)) }
func (Jumps) String() string     { return "rules jumps" }
func (s Quiet) String() string   { return fmt.Sprintf("quiet %v while schedulers change", s.Addrs) }
func (s Loud) String() string    { return fmt.Sprintf("loud %v", s.Addrs) }
func (s Repair) String() string  { return fmt.Sprintf("rules repair (%d bytes)", len(s.Text)) }
func (s EndQuiet) String() string {
	return fmt.Sprintf("end quiet %v", s.Addrs)
}

func (c Change) String() string {
	op := "del"
	if c.Add {
		op = "add"
	}
	return "set " + op + " " + c.Member.Set.String() + " " + c.Member.String()
}

// Outcome is what Apply learned.
type Outcome struct {
	// Refused are the objects the kernel refused; everything else landed.
	Refused []Refusal
	// Landed are the member changes that were written.
	Landed []Change
	// Rewritten are the sets written anew whole: they hold what the desired state
	// wanted of them when Apply ran.
	Rewritten []Set
	// Emptied: every set was written anew, empty, and the rules with them.
	Emptied bool
	// Text is the rules' text when they were written (nil otherwise); WrittenOut
	// the out-filter rules in it.
	Text       []byte
	WrittenOut []OutFilter
	// RulesUnknown: what the rules hold is not known any more (a write that was to
	// undo another failed): the next sync writes them.
	RulesUnknown bool
	// NeedFull: the rules went off; a full sync must write them again.
	NeedFull bool
	// Repaired: a Repair step wrote the rules (they are as its Text).
	Repaired bool
	// Later are steps to carry out beside the loop after a delay.
	Later []Delayed
}

// Delayed is a step to carry out after a delay.
type Delayed struct {
	After time.Duration
	Step  Step
}

// Refusal is one object the kernel refused.
type Refusal struct {
	// One of: a member change, an out-filter rule, an object of the backend's own
	// that no member stands for (its text).
	Change *Change
	Out    *OutFilter
	Other  string
	// Reason is the held-back reason (kubeproxy_ipvs_held_back_objects' label).
	Reason string
	// What names the object for logs and the held-back list.
	What string
	Err  error
}

// Held-back reasons a backend reports.
const (
	ReasonIPSet    = "ipset_error"    // ipset refused a member
	ReasonIPTables = "iptables_error" // iptables-restore refused a Service's rule
	ReasonNFTables = "nftables_error" // nftables refused a set element or a Service's rule
)

// MaxIsolatedRefusals bounds how many refused objects one write may set aside before
// it counts as failed as a whole: then something systemic is wrong, not one object.
const MaxIsolatedRefusals = 256

// Upstream's rule comments, which both backends write (operators' tooling knows them).
const (
	ForwardRulesComment     = "kubernetes forwarding rules"
	ForwardConntrackComment = "kubernetes forwarding conntrack rule"
	MasqueradeComment       = "kubernetes service traffic requiring SNAT"
	// QuietComment marks the rules that hold back refusals while schedulers change.
	QuietComment = "kube-proxy-ipvs: scheduler change in progress"
)
