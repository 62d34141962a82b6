// Command e2e-ipvswait runs in the e2e VM and waits, polling IPVS over netlink
// from one long-lived process (under TCG every process start costs a few hundred
// milliseconds, so a shell loop around ipvsadm cannot time anything finer), until
// the kernel holds what it is told to expect. Used by test/e2e/scale_test.go.
//
//	e2e-ipvswait -ready F -vs TCP/10.96.1.2:80 -rs 10.244.200.1:8080
//	    until that real server (weight > 0) is on that virtual server
//	e2e-ipvswait -ready F -nft-chain ip/kube-proxy/CHAIN
//	    until that chain exists (upstream's nftables mode: an endpoint's chain)
//	e2e-ipvswait -ready F -nft-dnat ip/kube-proxy/CHAIN=IP
//	    until a rule of that chain DNATs to IP (upstream's nftables mode: a
//	    Service's chain and its anonymous map of endpoints)
//	e2e-ipvswait -list-chains ip/kube-proxy [-prefix service-]
//	    prints "chain NAME" for each chain of that table, read over netlink;
//	    with -dnats and chain names as arguments, "dnat CHAIN IP..." for each
//	e2e-ipvswait -ready F [-all FILE] [-sets NAME=N,...] [-iptables TEXT]
//	    until every line "TCP/VIP:PORT RS RS..." of FILE holds exactly those real
//	    servers (weight > 0); prints "progress MS COMPLETE" whenever the count of
//	    those holding them changes and "ipvs MS" when all do. With -sets, also
//	    until each ipset
//	    holds at least N members ("set NAME MS" when it does; a NAME
//	    "nft:SET" is a set of the inet kube-proxy-ipvs table, a NAME
//	    "nftset:FAMILY/TABLE/SET" a set or map of any table, e.g.
//	    nftset:ip/kube-proxy/service-ips, both read over netlink; without
//	    -all, only the sets and the rules are waited for); with -iptables,
//	    until `iptables-save -t nat` or `iptables-legacy-save -t nat` contains
//	    TEXT ("iptables MS BACKEND"). Those two are
//	    read every -slow-interval: the set sizes over netlink (`ipset list -t`
//	    if that fails), the rules by running iptables-save, only once the sets
//	    are complete (a process costs ~80 ms under TCG).
//	    To stay cheap next to the daemon it measures, a poll is one dump of the
//	    virtual servers and a read of the real servers of each new one; once
//	    that costs more than reading every one not complete yet (the kernel's
//	    dumps are O(N^2), see allWait), only those are read.
//	    With virtual servers to wait for, nftables sets (read by listing every
//	    element: seconds at 100,000 Services) are first read once IPVS is
//	    complete, so their time is when that read ended.
//	    Both intervals stretch with the tables: after a read that took D the
//	    next comes no sooner than paceFactor x D, so the poller takes at most a
//	    quarter of a CPU however large the tables grow (at 50,000 x 4 fixed
//	    intervals cost it 157 s of the VM's CPU during a 276 s start).
//	    "pace FAST_MS SLOW_MS" at the end gives the last waits.
//
// It touches the -ready file once its netlink socket is open, prints
// "polls N MS" (poll count, ms since start) on success, and exits 1 on timeout.
// With -cpu-exe PATH it prints, when it ends either way, "cpu PID UTIME STIME
// CUTIME CSTIME" (clock ticks from /proc/PID/stat) of the process running PATH.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/ipvs"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/nftables"
)

func main() {
	ready := flag.String("ready", "", "file to create once polling starts")
	vsKey := flag.String("vs", "", "virtual server PROTO/IP:PORT")
	rsKey := flag.String("rs", "", "real server IP:PORT to wait for on -vs")
	all := flag.String("all", "", "file of lines 'PROTO/IP:PORT RS...' to wait for")
	interval := flag.Duration("interval", 10*time.Millisecond, "time between polls")
	timeout := flag.Duration("timeout", time.Minute, "give up after")
	setsFlag := flag.String("sets", "", "NAME=N,... ipsets to wait for (at least N members)")
	iptablesText := flag.String("iptables", "", "text to wait for in iptables-save -t nat")
	slowInterval := flag.Duration("slow-interval", time.Second, "time between ipset / iptables reads")
	nftChain := flag.String("nft-chain", "", "FAMILY/TABLE/CHAIN to wait for")
	listTable := flag.String("list-chains", "", "print the chains of FAMILY/TABLE (starting with -prefix) and exit")
	dnats := flag.Bool("dnats", false, "with -list-chains: print the DNAT destinations of the chains named as arguments instead")
	nftDNAT := flag.String("nft-dnat", "", "FAMILY/TABLE/CHAIN=IP: wait until that chain DNATs to IP")
	listPrefix := flag.String("prefix", "", "with -list-chains: only chains starting with this")
	cpuExe := flag.String("cpu-exe", "", "print the CPU time of the process running this executable at the end")
	flag.Parse()
	defer printCPU(*cpuExe)
	slow, err := newSlowWaits(*setsFlag, *iptablesText, *slowInterval)
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e-ipvswait:", err)
		os.Exit(1)
	}
	var err2 error
	if *listTable != "" && *dnats {
		err2 = printDNATs(*listTable, flag.Args())
	} else if *listTable != "" {
		err2 = listChains(*listTable, *listPrefix)
	} else if *nftDNAT != "" {
		err2 = runDNAT(*ready, *nftDNAT, *interval, *timeout)
	} else if *nftChain != "" {
		err2 = runChain(*ready, *nftChain, *interval, *timeout)
	} else {
		err2 = run(*ready, *vsKey, *rsKey, *all, *interval, *timeout, slow)
	}
	if err2 != nil {
		printCPU(*cpuExe)
		fmt.Fprintln(os.Stderr, "e2e-ipvswait:", err2)
		os.Exit(1)
	}
}

func parseVS(key string) (*ipvs.VirtualServer, error) {
	proto, hostport, ok := strings.Cut(key, "/")
	if !ok {
		return nil, fmt.Errorf("virtual server %q: want PROTO/IP:PORT", key)
	}
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		return nil, err
	}
	p, err := strconv.ParseUint(port, 10, 16)
	ip := net.ParseIP(host)
	if err != nil || ip == nil {
		return nil, fmt.Errorf("virtual server %q: bad address", key)
	}
	return &ipvs.VirtualServer{Address: ip, Protocol: proto, Port: uint16(p)}, nil
}

type want struct {
	vs  *ipvs.VirtualServer
	rss string // sorted, comma-joined IP:PORT
}

// realServers is the sorted, comma-joined list of vs's real servers with weight > 0.
func realServers(ctx context.Context, c ipvs.Interface, vs *ipvs.VirtualServer) string {
	rss, err := c.GetRealServers(ctx, vs)
	if err != nil {
		return ""
	}
	return rsKeys(rss)
}

// rsKeys is the sorted, comma-joined list of the real servers with weight > 0.
func rsKeys(rss []*ipvs.RealServer) string {
	var keys []string
	for _, rs := range rss {
		if rs.Weight > 0 {
			keys = append(keys, rs.Key())
		}
	}
	sort.Strings(keys)
	return strings.Join(keys, ",")
}

// readWants is the one virtual server of -vs/-rs (single) or the lines of -all.
func readWants(single bool, vsKey, rsKey, all string) ([]want, error) {
	if single {
		vs, err := parseVS(vsKey)
		if err != nil {
			return nil, err
		}
		return []want{{vs: vs, rss: rsKey}}, nil
	}
	if all == "" {
		return nil, nil
	}
	data, err := os.ReadFile(all)
	if err != nil {
		return nil, err
	}
	var wants []want
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		vs, err := parseVS(f[0])
		if err != nil {
			return nil, err
		}
		rss := append([]string(nil), f[1:]...)
		sort.Strings(rss)
		wants = append(wants, want{vs: vs, rss: strings.Join(rss, ",")})
	}
	return wants, nil
}

// ipvsReader is what the -all wait reads: *ipvs.Client, or the fake in tests.
type ipvsReader interface {
	GetVirtualServers(ctx context.Context) ([]*ipvs.VirtualServer, error)
	GetRealServers(ctx context.Context, vs *ipvs.VirtualServer) ([]*ipvs.RealServer, error)
}

// allWait is the state of the -all wait. A poll is one dump of the virtual
// servers (which are there), then one read of the real servers of each wanted
// virtual server there and not complete yet (a probe: one request, one lookup
// in the kernel's table); a virtual server once complete is not read again.
// A dump costs the kernel O(N^2) (each netlink round restarts its walk of the
// table; at 100,000 Services dumps took the poller 172 s of the VM's system CPU
// and its waits grew to 60 s), probing every wanted one O(N) with a larger
// constant (3 s at 10,000 under TCG). So once probing all that are left costs
// less than the last dump, the polls only probe them.
type allWait struct {
	wants    []want
	done     []bool
	complete int
	left     []int // indexes of the wants not complete
	// dumpCost is what the last dump took, probeCost one probe (the mean of
	// the last poll's); probing: the polls no longer dump.
	dumpCost, probeCost time.Duration
	probing             bool
	// paced is what the next wait is paced by: the last dump, or the last
	// poll's probes when the polls only probe. The first read of each new
	// virtual server is paid once, not repeated, and is left out.
	paced time.Duration
}

func newAllWait(wants []want) *allWait {
	a := &allWait{wants: wants, done: make([]bool, len(wants)), left: make([]int, len(wants))}
	for i := range a.left {
		a.left[i] = i
	}
	return a
}

// poll is one poll of the -all wait (see allWait).
func (a *allWait) poll(ctx context.Context, c ipvsReader) error {
	if a.probing {
		began := time.Now()
		err := a.probe(ctx, c, nil)
		a.paced = time.Since(began)
		return err
	}
	began := time.Now()
	vss, err := c.GetVirtualServers(ctx)
	if err != nil {
		return err
	}
	a.dumpCost = time.Since(began)
	a.paced = a.dumpCost
	have := make(map[string]bool, len(vss))
	for _, vs := range vss {
		have[vs.Key()] = true
	}
	if err := a.probe(ctx, c, have); err != nil {
		return err
	}
	if a.probeCost > 0 && time.Duration(len(a.left))*a.probeCost < a.dumpCost {
		a.probing = true
	}
	return nil
}

// probe reads the real servers of the wanted virtual servers not complete
// (only those in have, unless it is nil) and marks those holding exactly
// theirs (weight > 0).
func (a *allWait) probe(ctx context.Context, c ipvsReader, have map[string]bool) error {
	began, probes := time.Now(), 0
	still := a.left[:0]
	for k, i := range a.left {
		w := a.wants[i]
		if have != nil && !have[w.vs.Key()] {
			still = append(still, i)
			continue
		}
		rss, err := c.GetRealServers(ctx, w.vs)
		if err != nil {
			a.left = append(still, a.left[k:]...)
			return err
		}
		probes++
		if rsKeys(rss) == w.rss {
			a.done[i] = true
			a.complete++
			continue
		}
		still = append(still, i)
	}
	a.left = still
	if probes > 0 {
		a.probeCost = time.Since(began) / time.Duration(probes)
	}
	return nil
}

func run(ready, vsKey, rsKey, all string, interval, timeout time.Duration, slow *slowWaits) error {
	single := all == "" && vsKey != ""
	wants, err := readWants(single, vsKey, rsKey, all)
	if err != nil {
		return err
	}
	var c *ipvs.Client
	if len(wants) > 0 { // only sets and rules to wait for (upstream's nftables mode): no IPVS
		h, err := ipvs.New("")
		if err != nil {
			return err
		}
		defer h.Close()
		c = h
	}
	ctx := context.Background()
	start := time.Now()
	if ready != "" {
		if err := os.WriteFile(ready, nil, 0o644); err != nil {
			return err
		}
	}
	polls, last := 0, -1
	aw := newAllWait(wants)
	wait := interval
	for {
		polls++
		began := time.Now()
		if single {
			if !aw.done[0] && strings.Contains(","+realServers(ctx, c, wants[0].vs)+",", ","+wants[0].rss+",") {
				aw.done[0], aw.complete = true, 1
			}
		} else if aw.complete < len(wants) {
			if err := aw.poll(ctx, c); err != nil {
				return err
			}
		}
		complete := aw.complete
		elapsed := time.Since(start).Milliseconds()
		if !single && len(wants) > 0 && complete < len(wants) && complete != last {
			fmt.Printf("progress %d %d\n", elapsed, complete)
			last = complete
		}
		if !single && len(wants) > 0 && complete == len(wants) && last != -2 {
			fmt.Printf("progress %d %d\n", elapsed, complete)
			fmt.Printf("ipvs %d\n", elapsed)
			last = -2
		}
		// Listing an nftables set costs seconds at 100,000 Services: with
		// virtual servers to wait for, those sets are read once IPVS is
		// complete (their time is then when that read ended).
		slowDone := false
		if len(wants) == 0 || complete == len(wants) || !slow.listed() {
			slowDone = slow.poll(start)
		}
		if complete == len(wants) && slowDone {
			fmt.Printf("polls %d %d\n", polls, elapsed)
			fmt.Printf("pace %d %d\n", wait.Milliseconds(), slow.wait.Milliseconds())
			return nil
		}
		if time.Since(start) > timeout {
			return fmt.Errorf("timeout after %s and %d polls: %d of %d virtual servers holding their real servers; %s", timeout, polls, complete, len(wants), slow.pending())
		}
		cost := time.Since(began) - slow.cost
		if !single && len(wants) > 0 {
			cost = aw.paced
		}
		wait = pace(interval, cost)
		time.Sleep(wait)
	}
}

// paceFactor: after a read that took D, the next one waits at least
// paceFactor x D, so a poller whose reads grow with the tables it reads keeps
// to 1/(paceFactor+1) of a CPU instead of taking it from the daemon it times.
const paceFactor = 3

// pace is the wait after a read that took cost: interval, or paceFactor times
// the read when that is longer.
func pace(interval, cost time.Duration) time.Duration {
	return max(interval, paceFactor*cost)
}

// slowWaits are the ipset and iptables conditions, read by running the tools.
type slowWaits struct {
	sets     []setWait
	iptables string
	iptDone  bool
	interval time.Duration
	wait     time.Duration // interval, stretched by pace
	last     time.Time
	cost     time.Duration // of the read in the last poll call, 0 when none
	members  func(name string) int
}

type setWait struct {
	name string
	want int
	done bool
}

func newSlowWaits(setsFlag, iptables string, interval time.Duration) (*slowWaits, error) {
	w := &slowWaits{iptables: iptables, iptDone: iptables == "", interval: interval, wait: interval, members: setMembers}
	for _, kv := range strings.Split(setsFlag, ",") {
		if kv == "" {
			continue
		}
		name, n, ok := strings.Cut(kv, "=")
		want, err := strconv.Atoi(n)
		if !ok || err != nil {
			return nil, fmt.Errorf("-sets %q: want NAME=N pairs separated by commas", setsFlag)
		}
		w.sets = append(w.sets, setWait{name: name, want: want})
	}
	return w, nil
}

// poll reads what is not complete yet, at most every w.wait (interval,
// stretched by pace after each read); it reports whether everything is.
func (w *slowWaits) poll(start time.Time) bool {
	w.cost = 0
	done := w.iptDone
	for _, s := range w.sets {
		done = done && s.done
	}
	if done || time.Since(w.last) < w.wait {
		return done
	}
	w.last = time.Now()
	defer func() {
		w.cost = time.Since(w.last)
		w.wait = pace(w.interval, w.cost)
	}()
	done = true
	for i := range w.sets {
		s := &w.sets[i]
		if !s.done {
			if n := w.members(s.name); n >= s.want {
				s.done = true
				fmt.Printf("set %s %d %d\n", s.name, time.Since(start).Milliseconds(), n)
			}
		}
		done = done && s.done
	}
	if !w.iptDone && done {
		// Read once the sets are complete (the rule that uses them is written
		// after them): each read is two processes.
		// Either backend: upstream kube-proxy picks legacy or nft itself.
		for _, save := range []string{"iptables-save", "iptables-legacy-save"} {
			out, err := exec.Command(save, "-t", "nat").Output()
			if err == nil && strings.Contains(string(out), w.iptables) {
				w.iptDone = true
				fmt.Printf("iptables %d %s\n", time.Since(start).Milliseconds(), save)
				break
			}
		}
	}
	return done && w.iptDone
}

// listed reports whether some set is read by listing its elements (nftables)
// rather than by a header holding its size (ipset).
func (w *slowWaits) listed() bool {
	for _, s := range w.sets {
		if strings.HasPrefix(s.name, "nft:") || strings.HasPrefix(s.name, "nftset:") {
			return true
		}
	}
	return false
}

func (w *slowWaits) pending() string {
	var out []string
	for _, s := range w.sets {
		if !s.done {
			out = append(out, fmt.Sprintf("set %s below %d members", s.name, s.want))
		}
	}
	if !w.iptDone {
		out = append(out, fmt.Sprintf("iptables-save -t nat without %q", w.iptables))
	}
	if len(out) == 0 {
		return "ipsets and iptables complete"
	}
	return strings.Join(out, ", ")
}

// nftRules reads the nftables rules backend's table (opened on first use).
var nftRules nftables.Ruleset

// setMembers is the "Number of entries" of `ipset list -t NAME`, or the element
// count of the nftables set "nft:SET"; -1 when unknown.
func setMembers(name string) int {
	if key, ok := strings.CutPrefix(name, "nftset:"); ok {
		i := strings.LastIndexByte(key, '/')
		if i < 0 {
			return -1
		}
		return nftTableSetMembers(key[:i], key[i+1:])
	}
	if set, ok := strings.CutPrefix(name, "nft:"); ok {
		if nftRules == nil {
			r, err := nftables.NewNetlink(nftables.Table{Family: nftables.FamilyInet, Name: "kube-proxy-ipvs"}, nil)
			if err != nil {
				return -1
			}
			nftRules = r
		}
		elems, err := nftRules.ListElements(context.Background(), set)
		if err != nil {
			return -1
		}
		return len(elems)
	}
	if n, err := ipsetEntries(name); err == nil {
		return n
	}
	out, err := exec.Command("ipset", "list", "-t", name).Output()
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(line, "Number of entries: "); ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err == nil {
				return n
			}
		}
	}
	return -1
}

// runChain waits until the nftables chain key (FAMILY/TABLE/CHAIN) exists.
func runChain(ready, key string, interval, timeout time.Duration) error {
	if _, err := nftChainExists(key); err != nil {
		return err
	}
	start := time.Now()
	if ready != "" {
		if err := os.WriteFile(ready, nil, 0o644); err != nil {
			return err
		}
	}
	for polls := 1; ; polls++ {
		ok, err := nftChainExists(key)
		if err != nil {
			return err
		}
		if ok {
			fmt.Printf("polls %d %d\n", polls, time.Since(start).Milliseconds())
			return nil
		}
		if time.Since(start) > timeout {
			return fmt.Errorf("timeout after %s and %d polls: no chain %s", timeout, polls, key)
		}
		time.Sleep(interval)
	}
}
