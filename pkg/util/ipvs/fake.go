package ipvs

import (
	"bytes"
	"context"
	"fmt"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/fakeops"
	"net"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/ipfamily"
)

// Operation names counted by Fake.Ops and accepted by Fake.InjectError.
const (
	OpAddVS       = "AddVS"
	OpUpdateVS    = "UpdateVS"
	OpDelVS       = "DelVS"
	OpGetVS       = "GetVS"
	OpListVS      = "ListVS"
	OpAddRS       = "AddRS"
	OpUpdateRS    = "UpdateRS"
	OpDelRS       = "DelRS"
	OpListRS      = "ListRS"
	OpGetAll      = "GetAll"
	OpSetTimeouts = "SetTimeouts"
	OpFlush       = "Flush"
)

// Kernel default timeouts (ip_vs_proto_tcp.c / ip_vs_proto_udp.c).
const (
	defaultTCPTimeout    = 15 * time.Minute
	defaultTCPFinTimeout = 2 * time.Minute
	defaultUDPTimeout    = 5 * time.Minute
)

// knownSchedulers are the schedulers a stock kernel can load; "none" is accepted
// by the kernel as "no scheduler".
var knownSchedulers = map[string]bool{
	"rr": true, "wrr": true, "lc": true, "wlc": true, "lblc": true, "lblcr": true,
	"dh": true, "sh": true, "sed": true, "nq": true, "mh": true, "fo": true,
	"ovf": true, "twos": true, "none": true,
}

type fakeService struct {
	vs   VirtualServer
	dsts map[string]*RealServer // by RealServer.Key
	// list is the kernel's list of the service's destinations, by RealServer.Key:
	// the kernel adds a destination at its head (list_add in __ip_vs_update_dest),
	// and the sh and mh schedulers build their tables walking it.
	list []string
	// trash holds deleted destinations that still had connections: the kernel keeps
	// them (ip_vs_trash_get_dest) and an add of the same address takes one back with
	// its connections.
	trash map[string]*RealServer
}

// Fake is an in-memory IPVS that answers like the kernel: adding an existing
// virtual or real server fails with EEXIST, touching a missing virtual server fails
// with ESRCH and a missing real server with ENOENT (the same wrapped errors as
// Client, so IsExists / IsNotFound match), the kernel sets the hashed flag on every
// stored virtual server, an unknown scheduler is ENOENT and a real server of the
// other family is EINVAL. A failed call changes nothing.
//
// Real server addresses are refused as the kernel refuses them (ip_vs_new_dest,
// checked on add only, after the virtual server lookup; update and delete of
// such an address find nothing: ENOENT), with EINVAL (IsInvalid):
//   - IPv4: multicast (224.0.0.0/4), 255.255.255.255 and 0.0.0.0, which
//     inet_addr_type calls multicast or broadcast. The rest of 0.0.0.0/8, class
//     E, loopback (a local address) and link-local are accepted.
//   - IPv6: multicast, :: and link-local (fe80::/10). ::1, site-local and
//     v4-compatible addresses are accepted.
//
// What the kernel decides from the namespace's routes is not modelled: it also
// refuses an IPv4 address its local table calls broadcast (the broadcast
// address of a bound subnet) and accepts an IPv6 link-local or multicast
// address that routes to the loopback device (one bound on this node).
// Virtual server addresses are not checked by the kernel (multicast,
// broadcast, unspecified, loopback and link-local virtual servers are added),
// nor is port 0; the scheduler "none" is accepted, an empty one is ENOENT.
// TestFakeRefusalContract and TestVMRefusalContract (in the VM) prove each rule.
type Fake struct {
	mu               sync.Mutex
	services         map[string]*fakeService // by VirtualServer.Key
	tcp              time.Duration
	tcpfin           time.Duration
	udp              time.Duration
	fakeops.Recorder // Ops, ResetOps, InjectError (opName: one of the Op* names)
}

var _ Interface = &Fake{}

// NewFake returns an empty Fake with the kernel's default timeouts.
func NewFake() *Fake {
	return &Fake{
		services: map[string]*fakeService{},
		tcp:      defaultTCPTimeout,
		tcpfin:   defaultTCPFinTimeout,
		udp:      defaultUDPTimeout,
	}
}

// begin counts op and returns the injected error for it, if any. Callers hold f.mu.
func (f *Fake) begin(ctx context.Context, op string) error {
	return f.Recorder.Begin(ctx, op)
}

func copyVS(vs *VirtualServer) *VirtualServer {
	c := *vs
	c.Address = normalizeIP(append(net.IP(nil), vs.Address...))
	return &c
}

func copyRS(rs *RealServer) *RealServer {
	c := *rs
	c.Address = normalizeIP(append(net.IP(nil), rs.Address...))
	return &c
}

func (f *Fake) AddVirtualServer(ctx context.Context, vs *VirtualServer) error {
	if _, err := toService(vs); err != nil {
		return fmt.Errorf("adding virtual server: %w", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.begin(ctx, OpAddVS); err != nil {
		return errorf(err, "adding virtual server %s", vs)
	}
	if _, ok := f.services[vs.Key()]; ok {
		return errorf(syscall.EEXIST, "adding virtual server %s", vs)
	}
	if !knownSchedulers[vs.Scheduler] {
		return errorf(syscall.ENOENT, "adding virtual server %s", vs)
	}
	stored := copyVS(vs)
	stored.Flags |= FlagHashed
	stored.Stats = Counters{} // a new service starts at zero
	f.services[vs.Key()] = &fakeService{vs: *stored, dsts: map[string]*RealServer{}}
	return nil
}

func (f *Fake) UpdateVirtualServer(ctx context.Context, vs *VirtualServer) error {
	if _, err := toService(vs); err != nil {
		return fmt.Errorf("updating virtual server: %w", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.begin(ctx, OpUpdateVS); err != nil {
		return errorf(err, "updating virtual server %s", vs)
	}
	svc, ok := f.services[vs.Key()]
	if !ok {
		return errorf(syscall.ESRCH, "updating virtual server %s", vs)
	}
	if !knownSchedulers[vs.Scheduler] {
		return errorf(syscall.ENOENT, "updating virtual server %s", vs)
	}
	stored := copyVS(vs)
	stored.Flags |= FlagHashed
	stored.Stats = svc.vs.Stats // the kernel keeps a service's counters across updates
	svc.vs = *stored
	return nil
}

func (f *Fake) DeleteVirtualServer(ctx context.Context, vs *VirtualServer) error {
	if _, err := toService(vs); err != nil {
		return fmt.Errorf("deleting virtual server: %w", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.begin(ctx, OpDelVS); err != nil {
		return errorf(err, "deleting virtual server %s", vs)
	}
	if _, ok := f.services[vs.Key()]; !ok {
		return errorf(syscall.ESRCH, "deleting virtual server %s", vs)
	}
	delete(f.services, vs.Key())
	return nil
}

func (f *Fake) GetVirtualServer(ctx context.Context, vs *VirtualServer) (*VirtualServer, error) {
	if _, err := toService(vs); err != nil {
		return nil, fmt.Errorf("getting virtual server: %w", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.begin(ctx, OpGetVS); err != nil {
		return nil, errorf(err, "getting virtual server %s", vs)
	}
	svc, ok := f.services[vs.Key()]
	if !ok {
		return nil, errorf(syscall.ESRCH, "getting virtual server %s", vs)
	}
	return copyVS(&svc.vs), nil
}

// GetVirtualServers returns the virtual servers sorted as Dump prints them.
func (f *Fake) GetVirtualServers(ctx context.Context) ([]*VirtualServer, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.begin(ctx, OpListVS); err != nil {
		return nil, errorf(err, "listing virtual servers")
	}
	out := make([]*VirtualServer, 0, len(f.services))
	for _, svc := range f.sortedServices() {
		out = append(out, copyVS(&svc.vs))
	}
	return out, nil
}

func (f *Fake) AddRealServer(ctx context.Context, vs *VirtualServer, rs *RealServer) error {
	return f.realServerOp(ctx, OpAddRS, "adding", "to", vs, rs, func(svc *fakeService) error {
		if _, ok := svc.dsts[rs.Key()]; ok {
			return syscall.EEXIST
		}
		if !kernelAcceptsDestination(rs.Address) {
			return syscall.EINVAL
		}
		d := &RealServer{Address: normalizeIP(append(net.IP(nil), rs.Address...)), Port: rs.Port, Weight: rs.Weight}
		if t, ok := svc.trash[rs.Key()]; ok {
			delete(svc.trash, rs.Key())
			d.ActiveConn, d.InactiveConn = t.ActiveConn, t.InactiveConn
		}
		svc.dsts[rs.Key()] = d
		svc.list = slices.Insert(svc.list, 0, rs.Key())
		return nil
	})
}

func (f *Fake) UpdateRealServer(ctx context.Context, vs *VirtualServer, rs *RealServer) error {
	return f.realServerOp(ctx, OpUpdateRS, "updating", "of", vs, rs, func(svc *fakeService) error {
		d, ok := svc.dsts[rs.Key()]
		if !ok {
			return syscall.ENOENT
		}
		d.Weight = rs.Weight // the kernel keeps the connection counters
		return nil
	})
}

func (f *Fake) DeleteRealServer(ctx context.Context, vs *VirtualServer, rs *RealServer) error {
	return f.realServerOp(ctx, OpDelRS, "deleting", "of", vs, rs, func(svc *fakeService) error {
		d, ok := svc.dsts[rs.Key()]
		if !ok {
			return syscall.ENOENT
		}
		if d.ActiveConn+d.InactiveConn > 0 {
			if svc.trash == nil {
				svc.trash = map[string]*RealServer{}
			}
			svc.trash[rs.Key()] = d
		}
		delete(svc.dsts, rs.Key())
		svc.list = slices.DeleteFunc(svc.list, func(k string) bool { return k == rs.Key() })
		return nil
	})
}

func (f *Fake) realServerOp(ctx context.Context, op, verb, preposition string, vs *VirtualServer, rs *RealServer, apply func(*fakeService) error) error {
	if _, err := toService(vs); err != nil {
		return fmt.Errorf("%s real server %s: %w", verb, rs, err)
	}
	if _, err := toDestination(rs); err != nil {
		return fmt.Errorf("%s real server of %s: %w", verb, vs, err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	fail := func(err error) error {
		return errorf(err, "%s real server %s %s %s", verb, rs, preposition, vs)
	}
	// Checked before any round trip, as Client does.
	if err := checkSameFamily(vs, rs); err != nil {
		return fail(err)
	}
	if err := f.begin(ctx, op); err != nil {
		return fail(err)
	}
	svc, ok := f.services[vs.Key()]
	if !ok {
		return fail(syscall.ESRCH)
	}
	if err := apply(svc); err != nil {
		return fail(err)
	}
	return nil
}

// ListOrder returns the real servers of vs in the order of the kernel's list (the
// most recently added first), which the sh and mh schedulers' tables depend on.
func (f *Fake) ListOrder(vs *VirtualServer) []*RealServer {
	f.mu.Lock()
	defer f.mu.Unlock()
	svc, ok := f.services[vs.Key()]
	if !ok {
		return nil
	}
	out := make([]*RealServer, 0, len(svc.list))
	for _, k := range svc.list {
		out = append(out, copyRS(svc.dsts[k]))
	}
	return out
}

// GetRealServers lists the real servers of vs sorted by address and port; as the
// kernel, a missing virtual server gives an empty list.
func (f *Fake) GetRealServers(ctx context.Context, vs *VirtualServer) ([]*RealServer, error) {
	if _, err := toService(vs); err != nil {
		return nil, fmt.Errorf("listing real servers: %w", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.begin(ctx, OpListRS); err != nil {
		return nil, errorf(err, "listing real servers of %s", vs)
	}
	svc, ok := f.services[vs.Key()]
	if !ok {
		return []*RealServer{}, nil
	}
	out := make([]*RealServer, 0, len(svc.dsts))
	for _, d := range sortedDestinations(svc) {
		out = append(out, copyRS(d))
	}
	return out, nil
}

// GetAll returns every virtual server with its real servers, sorted as Dump
// prints them: one operation, as the Client's bulk read.
func (f *Fake) GetAll(ctx context.Context, af ipfamily.Family, keep func(*VirtualServer) bool) ([]VirtualServerDump, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.begin(ctx, OpGetAll); err != nil {
		return nil, errorf(err, "listing virtual servers with their real servers")
	}
	out := make([]VirtualServerDump, 0, len(f.services))
	for _, svc := range f.sortedServices() {
		if !af.Has(svc.vs.Address) || keep != nil && !keep(&svc.vs) {
			continue
		}
		d := VirtualServerDump{VirtualServer: copyVS(&svc.vs), RealServers: make([]*RealServer, 0, len(svc.dsts))}
		for _, rs := range sortedDestinations(svc) {
			d.RealServers = append(d.RealServers, copyRS(rs))
		}
		out = append(out, d)
	}
	return out, nil
}

// Write applies the writes one by one through the single calls (one operation
// each), as the kernel processes a pipelined batch.
func (f *Fake) Write(ctx context.Context, writes []Write) []error {
	errs := make([]error, len(writes))
	for i, w := range writes {
		switch w.Kind {
		case WriteAddVirtualServer:
			errs[i] = f.AddVirtualServer(ctx, w.VS)
		case WriteUpdateVirtualServer:
			errs[i] = f.UpdateVirtualServer(ctx, w.VS)
		case WriteDeleteVirtualServer:
			errs[i] = f.DeleteVirtualServer(ctx, w.VS)
		case WriteAddRealServer:
			errs[i] = f.AddRealServer(ctx, w.VS, w.RS)
		case WriteUpdateRealServer:
			errs[i] = f.UpdateRealServer(ctx, w.VS, w.RS)
		case WriteDeleteRealServer:
			errs[i] = f.DeleteRealServer(ctx, w.VS, w.RS)
		default:
			errs[i] = fmt.Errorf("unknown write kind %d", w.Kind)
		}
	}
	return errs
}

// SetVirtualServerStats sets the counters GetVirtualServers reports for vs.
func (f *Fake) SetVirtualServerStats(vs *VirtualServer, c Counters) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	svc, ok := f.services[vs.Key()]
	if !ok {
		return errorf(syscall.ESRCH, "setting counters of %s", vs)
	}
	svc.vs.Stats = c
	return nil
}

// SetRealServerConnections sets the active and inactive connection counters the
// kernel would report for rs of vs (tests use it to drive graceful termination).
func (f *Fake) SetRealServerConnections(vs *VirtualServer, rs *RealServer, active, inactive int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	svc, ok := f.services[vs.Key()]
	if !ok {
		return errorf(syscall.ESRCH, "setting connections of real server %s of %s", rs, vs)
	}
	d, ok := svc.dsts[rs.Key()]
	if !ok {
		return errorf(syscall.ENOENT, "setting connections of real server %s of %s", rs, vs)
	}
	d.ActiveConn, d.InactiveConn = active, inactive
	return nil
}

func (f *Fake) ConfigureTimeouts(ctx context.Context, tcp, tcpfin, udp time.Duration) error {
	if tcp == 0 && tcpfin == 0 && udp == 0 {
		return nil
	}
	if tcp < 0 || tcpfin < 0 || udp < 0 {
		return fmt.Errorf("configuring IPVS timeouts: negative timeout (tcp %v, tcpfin %v, udp %v)", tcp, tcpfin, udp)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.begin(ctx, OpSetTimeouts); err != nil {
		return errorf(err, "configuring IPVS timeouts (tcp %v, tcpfin %v, udp %v)", tcp, tcpfin, udp)
	}
	f.tcp = keepOrSet(f.tcp, tcp)
	f.tcpfin = keepOrSet(f.tcpfin, tcpfin)
	f.udp = keepOrSet(f.udp, udp)
	return nil
}

// Timeouts returns the current tcp, tcpfin and udp timeouts.
func (f *Fake) Timeouts() (tcp, tcpfin, udp time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.tcp, f.tcpfin, f.udp
}

func (f *Fake) Flush(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.begin(ctx, OpFlush); err != nil {
		return errorf(err, "flushing IPVS virtual servers")
	}
	f.services = map[string]*fakeService{}
	return nil
}

// Dump prints the table like `ipvsadm -Ln` (without the header), sorted by
// protocol, address and port, one real server per line:
//
//	TCP  10.0.0.1:80 rr persistent 10800
//	  -> 10.1.0.1:80 Masq 1 0 0
//
// The real server columns are forward method, weight, active and inactive
// connections.
func (f *Fake) Dump() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var b strings.Builder
	for _, svc := range f.sortedServices() {
		vs := &svc.vs
		fmt.Fprintf(&b, "%-4s %s %s", vs.Protocol, net.JoinHostPort(vs.Address.String(), fmt.Sprint(vs.Port)), vs.Scheduler)
		for _, fl := range flagNames(vs) {
			b.WriteString(" " + fl)
		}
		b.WriteString("\n")
		for _, d := range sortedDestinations(svc) {
			fmt.Fprintf(&b, "  -> %s Masq %d %d %d\n", d.Key(), d.Weight, d.ActiveConn, d.InactiveConn)
		}
	}
	return b.String()
}

// flagNames names the flags as ipvsadm prints them (the hashed flag is not shown).
func flagNames(vs *VirtualServer) []string {
	var out []string
	prefix := "flag-"
	switch vs.Scheduler {
	case "sh", "mh":
		prefix = vs.Scheduler + "-"
	}
	if vs.Flags&FlagSchedSH1 != 0 {
		if prefix == "flag-" {
			out = append(out, "flag-1")
		} else {
			out = append(out, prefix+"fallback")
		}
	}
	if vs.Flags&FlagSchedSH2 != 0 {
		if prefix == "flag-" {
			out = append(out, "flag-2")
		} else {
			out = append(out, prefix+"port")
		}
	}
	if vs.Flags&FlagPersistent != 0 {
		out = append(out, fmt.Sprintf("persistent %d", vs.Timeout))
	}
	if vs.Flags&FlagOnePacket != 0 {
		out = append(out, "ops")
	}
	return out
}

// ipLess orders IPv4 before IPv6 and addresses numerically within a family.
func ipLess(a, b net.IP) bool {
	a4, b4 := a.To4(), b.To4()
	if (a4 == nil) != (b4 == nil) {
		return a4 != nil
	}
	if a4 != nil {
		return bytes.Compare(a4, b4) < 0
	}
	return bytes.Compare(a.To16(), b.To16()) < 0
}

func (f *Fake) sortedServices() []*fakeService {
	out := make([]*fakeService, 0, len(f.services))
	for _, svc := range f.services {
		out = append(out, svc)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := &out[i].vs, &out[j].vs
		if a.Protocol != b.Protocol {
			return a.Protocol < b.Protocol
		}
		if !a.Address.Equal(b.Address) {
			return ipLess(a.Address, b.Address)
		}
		return a.Port < b.Port
	})
	return out
}

func sortedDestinations(svc *fakeService) []*RealServer {
	out := make([]*RealServer, 0, len(svc.dsts))
	for _, d := range svc.dsts {
		out = append(out, d)
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].Address.Equal(out[j].Address) {
			return ipLess(out[i].Address, out[j].Address)
		}
		return out[i].Port < out[j].Port
	})
	return out
}

// kernelAcceptsDestination is the address-type check of ip_vs_new_dest, as far
// as it does not depend on the namespace's routes (see Fake).
func kernelAcceptsDestination(ip net.IP) bool {
	if v4 := ip.To4(); v4 != nil {
		return !v4.IsMulticast() && !v4.Equal(net.IPv4bcast) && !v4.IsUnspecified()
	}
	return !ip.IsMulticast() && !ip.IsUnspecified() && !ip.IsLinkLocalUnicast()
}
