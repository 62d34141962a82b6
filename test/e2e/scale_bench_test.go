//go:build e2e && e2escale

// Issue 31: upstream's nftables mode as a column of the scale run, the CPU time
// of each daemon's start-up and the kernel tools' floor for the same content,
// and the figures as JSON for hack/bench-report.py. See scale_test.go.
package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/base32"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/test/e2e/framework"
)

// The columns of KPI_SCALE_PROXIES.
const (
	colOurs        = "ours"              // ours, the rules backend of KPI_SCALE_RULES_BACKEND (default iptables)
	colOursNFT     = "ours-nftables"     // ours with --ipvs-rules-backend=nftables
	colUpstream    = "upstream"          // upstream v1.37.2 --proxy-mode=ipvs
	colUpstreamNFT = "upstream-nftables" // upstream v1.37.2 --proxy-mode=nftables
)

// startSuffixes: ours or ours-nftables with warm start on ("ours-warm": the first
// lists' objects programmed as they arrive) or off ("ours-cold": nothing before
// the lists are complete, as upstream; also the default, "ours").
var startSuffixes = map[string][]string{"-warm": {"--ipvs-warm-start=true"}, "-cold": {"--ipvs-warm-start=false"}}

// splitStartSuffix is name without its start suffix, and the flags the suffix adds.
func splitStartSuffix(name string) (string, []string) {
	for suffix, args := range startSuffixes {
		if base, ok := strings.CutSuffix(name, suffix); ok {
			return base, args
		}
	}
	return name, nil
}

func isUpstream(name string) bool { return strings.HasPrefix(name, "upstream") }

// upstreamNFTTable is the table upstream's nftables mode programs (IPv4).
const upstreamNFTTable = "ip/kube-proxy"

// upstreamNFTConfig is config for upstream's nftables mode: the same file with
// mode nftables and its own section holding the ipvs section's periods (upstream's
// default minSyncPeriod for nftables is 1s; the run gives every daemon 0s).
func upstreamNFTConfig(config string) string {
	c := strings.Replace(config, "\nmode: ipvs\n", "\nmode: nftables\n", 1)
	var period, min string
	for _, l := range strings.Split(config, "\n") {
		if v, ok := strings.CutPrefix(l, "  syncPeriod: "); ok {
			period = v
		}
		if v, ok := strings.CutPrefix(l, "  minSyncPeriod: "); ok {
			min = v
		}
	}
	return c + "nftables:\n  syncPeriod: " + period + "\n  minSyncPeriod: " + min + "\n"
}

// upstreamNFTServiceChain is the chain of a Service port in upstream's
// nftables mode: "service-", an 8-character base32 SHA-256 prefix of
// "ns/name/proto/portname", then that string. Without session affinity (v1.37)
// its one rule DNATs to the endpoints through an anonymous map, and no
// endpoint chain exists.
func upstreamNFTServiceChain(ns, name, proto, portName string) string {
	s := fmt.Sprintf("%s/%s/%s/%s", ns, name, proto, portName)
	h := sha256.Sum256([]byte(s))
	return "service-" + base32.StdEncoding.EncodeToString(h[:])[:8] + "-" + s
}

// scaleCPU is a daemon's CPU time from its start until the poller saw
// everything programmed (or gave up): its own and its waited-for children's
// (upstream's ipset, iptables-restore and nft processes, ours' ipset restore).
type scaleCPU struct {
	User, Sys, ChildUser, ChildSys float64 // seconds
	OK                             bool
}

func (c scaleCPU) user() float64 { return c.User + c.ChildUser }
func (c scaleCPU) sys() float64  { return c.Sys + c.ChildSys }

// scaleParseCPU reads the poller's "cpu PID UT ST CUT CST" line (ticks, 100 a second).
func scaleParseCPU(out string) scaleCPU {
	var c scaleCPU
	for _, f := range scaleWaitLines(out, "cpu") {
		if len(f) != 5 {
			continue
		}
		var v [4]float64
		for i := range v {
			n, _ := strconv.ParseFloat(f[1+i], 64)
			v[i] = n / 100
		}
		c = scaleCPU{User: v[0], Sys: v[1], ChildUser: v[2], ChildSys: v[3], OK: true}
	}
	return c
}

func (c scaleCPU) String() string {
	if !c.OK {
		return "not measured (the process was not found)"
	}
	return fmt.Sprintf("user %.1f s + system %.1f s (of which its child processes %.1f s + %.1f s)", c.user(), c.sys(), c.ChildUser, c.ChildSys)
}

// upstreamNFTFullSync makes upstream's nftables mode run a full sync now: a
// change of the node's topology labels does (OnTopologyChange), the same sync
// it runs at start-up and every hour (proxyutil.FullSyncPeriod) and that no
// syncPeriod-long run would otherwise see. It returns the full syncs' figures
// before and after.
func upstreamNFTFullSync(t *testing.T, ctx context.Context, client kubernetes.Interface, run int) (before, after scaleSyncs, err error) {
	before, _ = scaleReadSyncs(t, ctx)
	patch := fmt.Appendf(nil, `{"metadata":{"labels":{"topology.kubernetes.io/zone":"kpi-bench-%d"}}}`, run)
	if _, err := client.CoreV1().Nodes().Patch(ctx, framework.NodeName, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return before, after, fmt.Errorf("labelling node %s: %w", framework.NodeName, err)
	}
	t.Cleanup(func() {
		patch := []byte(`{"metadata":{"labels":{"topology.kubernetes.io/zone":null}}}`)
		if _, err := client.CoreV1().Nodes().Patch(context.Background(), framework.NodeName, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Errorf("removing the zone label of node %s: %v", framework.NodeName, err)
		}
	})
	err = framework.Eventually(ctx, scaleProgramTimeoutOr(), 2*time.Second, func(ctx context.Context) error {
		after, _ = scaleReadSyncs(t, ctx)
		n1, _ := before.fullSyncs()
		if n2, _ := after.fullSyncs(); n2 <= n1 {
			return fmt.Errorf("no IPv4 full sync after the node's zone label changed (%.0f full syncs)", n2)
		}
		return nil
	})
	return before, after, err
}

// scaleProgramTimeoutOr is KPI_SCALE_PROGRAM_TIMEOUT or scaleProgramTimeout.
func scaleProgramTimeoutOr() time.Duration {
	if d, err := time.ParseDuration(os.Getenv("KPI_SCALE_PROGRAM_TIMEOUT")); err == nil && d > 0 {
		return d
	}
	return scaleProgramTimeout
}

// scaleTool is one kernel tool's run over the whole content.
type scaleTool struct {
	Name            string
	Wall, User, Sys float64 // seconds
}

// scaleFloor is what the kernel's own tools take to write the content of
// /tmp/scale-want.txt (every Service's virtual server and real servers): IPVS
// by `ipvsadm -R`, the addresses by `ip -batch` on a dummy link, the two sets
// by `ipset restore` (iptables backend) or `nft -f` (nftables backend). The
// node must be clean; it is left clean.
type scaleFloor struct {
	Tools []scaleTool
}

func (f scaleFloor) tool(name string) scaleTool {
	for _, t := range f.Tools {
		if t.Name == name {
			return t
		}
	}
	return scaleTool{}
}

// total is the wall time of IPVS, the addresses and sets ("ipset" or "nft").
func (f scaleFloor) total(sets string) float64 {
	return f.tool("ipvsadm").Wall + f.tool("ip").Wall + f.tool(sets).Wall
}

const scaleFloorScript = `set -e
w=/tmp/scale-want.txt
n=$(wc -l < $w)
m=$(awk '{m += NF-1} END {print m}' $w)
awk '{split($1, a, "/"); print "-A -t " a[2] " -s rr"; for (i = 2; i <= NF; i++) print "-a -t " a[2] " -r " $i " -m -w 1"}' $w > /tmp/floor.ipvs
awk '{split($1, a, "/"); split(a[2], b, ":"); print "address add " b[1] "/32 dev kpi-floor0"}' $w > /tmp/floor.ip
max=$(( (m > 65536 ? m : 65536) ))
{
  echo "create KPI-FLOOR-CIP hash:ip,port family inet hashsize 1024 maxelem $max"
  echo "create KPI-FLOOR-LB hash:ip,port,ip family inet hashsize 1024 maxelem $max"
  awk '{split($1, a, "/"); split(a[2], b, ":"); print "add KPI-FLOOR-CIP " b[1] ",tcp:" b[2]; for (i = 2; i <= NF; i++) {split($i, e, ":"); print "add KPI-FLOOR-LB " e[1] ",tcp:" e[2] "," e[1]}}' $w
} > /tmp/floor.ipset
{
  echo "table ip kpi-floor {"
  echo " set cip { type ipv4_addr . inet_proto . inet_service; size $max; }"
  echo " set lb { type ipv4_addr . inet_proto . inet_service . ipv4_addr; size $max; }"
  echo "}"
  awk 'BEGIN {printf "add element ip kpi-floor cip { "} {split($1, a, "/"); split(a[2], b, ":"); printf "%s%s . tcp . %s", (NR > 1 ? ", " : ""), b[1], b[2]} END {print " }"}' $w
  awk 'BEGIN {printf "add element ip kpi-floor lb { "} {for (i = 2; i <= NF; i++) {split($i, e, ":"); printf "%s%s . tcp . %s . %s", (k++ > 0 ? ", " : ""), e[1], e[2], e[1]}} END {print " }"}' $w
} > /tmp/floor.nft
ip link add kpi-floor0 type dummy
TIMEFORMAT='%R %U %S'
t() { local name=$1; shift; { time "$@" > /dev/null; } 2> /tmp/floor.time; echo "$name $(tail -n 1 /tmp/floor.time)"; }
t ipvsadm ipvsadm -R < /tmp/floor.ipvs
t ip ip -batch /tmp/floor.ip
t ipset ipset restore -f /tmp/floor.ipset
t nft nft -f /tmp/floor.nft
echo "check $(ipvsadm -Ln | grep -c '^TCP') $(ipvsadm -Ln | grep -c -- '->.*Masq') $(ip -o addr show dev kpi-floor0 | grep -c 'inet ') $(ipset list -t KPI-FLOOR-CIP | awk '/^Number of entries/ {print $4}') $(ipset list -t KPI-FLOOR-LB | awk '/^Number of entries/ {print $4}') $n $m"
`

const scaleFloorCleanup = `ipvsadm -C; ip link del kpi-floor0 2>/dev/null; ipset destroy KPI-FLOOR-CIP 2>/dev/null; ipset destroy KPI-FLOOR-LB 2>/dev/null; nft delete table ip kpi-floor 2>/dev/null; true`

// scaleRunFloor writes the content with the kernel's tools, timed (bash's time:
// wall, user, system), and checks that the kernel holds all of it.
func scaleRunFloor(t *testing.T, ctx context.Context, nsvc int) scaleFloor {
	t.Helper()
	fctx, cancel := context.WithTimeout(ctx, 60*time.Minute)
	defer cancel()
	defer func() {
		if _, err := vm.Sh(context.Background(), scaleFloorCleanup); err != nil {
			t.Errorf("removing the floor's IPVS, link, sets and table: %v", err)
		}
	}()
	out, err := vm.Sh(fctx, scaleFloorScript)
	if err != nil {
		t.Fatalf("the kernel tools' floor: %v\n%s", err, out)
	}
	var f scaleFloor
	for _, line := range strings.Split(out, "\n") {
		fs := strings.Fields(line)
		if len(fs) == 4 && fs[0] != "check" {
			var v [3]float64
			for i := range v {
				v[i], _ = strconv.ParseFloat(fs[1+i], 64)
			}
			f.Tools = append(f.Tools, scaleTool{Name: fs[0], Wall: v[0], User: v[1], Sys: v[2]})
		}
		if len(fs) == 8 && fs[0] == "check" {
			n := nsvc * scaleEndpoints
			want := []string{strconv.Itoa(nsvc), strconv.Itoa(n), strconv.Itoa(nsvc), strconv.Itoa(nsvc), strconv.Itoa(n)}
			if strings.Join(fs[1:6], " ") != strings.Join(want, " ") {
				t.Fatalf("the tools did not write everything: virtual servers, real servers, addresses, CIP and LB set members %v, want %v", fs[1:6], want)
			}
		}
	}
	nftCount, err := vm.Sh(fctx, "nft list set ip kpi-floor lb | tr ',' '\\n' | grep -c ' \\. tcp \\. '")
	if err != nil || strings.TrimSpace(nftCount) != strconv.Itoa(nsvc*scaleEndpoints) {
		t.Fatalf("nft -f wrote %q elements of set lb, want %d (%v)", strings.TrimSpace(nftCount), nsvc*scaleEndpoints, err)
	}
	if len(f.Tools) != 4 {
		t.Fatalf("the kernel tools' floor: want four timings, got:\n%s", out)
	}
	return f
}

// scaleJSONFigures is one column of the JSON output (seconds; 0 = not measured).
type scaleJSONFigures struct {
	Name          string    `json:"name"`
	Start         float64   `json:"start_s,omitempty"`
	NotAfter      float64   `json:"not_after_s,omitempty"`
	StartFull     float64   `json:"startup_full_sync_s,omitempty"`
	FullResync    float64   `json:"full_resync_s,omitempty"`
	FullResyncHow string    `json:"full_resync_how,omitempty"`
	ChangeP50     float64   `json:"change_p50_s,omitempty"`
	ChangeP99     float64   `json:"change_p99_s,omitempty"`
	ChangeMax     float64   `json:"change_max_s,omitempty"`
	Changes       int       `json:"changes"`
	ChangeNotAft  float64   `json:"change_not_after_s,omitempty"`
	CPU           *scaleCPU `json:"cpu_to_programmed,omitempty"`
	RSSMiB        float64   `json:"rss_mib"`
	PeakRSSMiB    float64   `json:"peak_rss_mib"`
	RulesBackend  string    `json:"rules_backend,omitempty"`
}

// scaleJSON is the whole run, written to KPI_SCALE_JSON.
type scaleJSON struct {
	Date      string             `json:"date"`
	Commit    string             `json:"commit"`
	Services  int                `json:"services"`
	Endpoints int                `json:"endpoints"`
	Changes   int                `json:"changes"`
	VM        string             `json:"vm"`
	Load      string             `json:"host_load"`
	Columns   []scaleJSONFigures `json:"columns"`
	Floor     *scaleFloor        `json:"floor,omitempty"`
}

func scaleToJSON(f *scaleFigures) scaleJSONFigures {
	j := scaleJSONFigures{Name: f.name, Start: f.startAll.Seconds(), NotAfter: f.unfinished.Seconds(), StartFull: f.startFull.Seconds(),
		FullResync: f.fullMean.Seconds(), FullResyncHow: f.fullHow, Changes: len(f.lat), RSSMiB: f.rss, PeakRSSMiB: f.hwm, RulesBackend: f.rulesBackend}
	j.ChangeNotAft = f.changesNotAfter.Seconds()
	if len(f.lat) > 0 {
		j.ChangeP50 = scalePercentile(f.lat, 50).Seconds()
		j.ChangeP99 = scalePercentile(f.lat, 99).Seconds()
		j.ChangeMax = scaleMax(f.lat).Seconds()
	}
	if f.cpu.OK {
		c := f.cpu
		j.CPU = &c
	}
	return j
}

// scaleCompareAll prints the table of every column and the floor, with the ratios
// ours / upstream and ours / tools, and the share of ours' start-up that was
// kernel (system CPU) time.
func scaleCompareAll(all []*scaleFigures, floor *scaleFloor, nsvc int) {
	fmt.Println()
	fmt.Printf("SCALE-CMP: %d Services x %d endpoints, same VM, same objects, one daemon after the other\n", nsvc, scaleEndpoints)
	head := "SCALE-CMP: | figure |"
	sep := "SCALE-CMP: | --- |"
	for _, f := range all {
		head += " " + f.name + " |"
		sep += " --- |"
	}
	fmt.Println(head)
	fmt.Println(sep)
	cell := func(f *scaleFigures, d time.Duration, startup bool) string {
		switch {
		case d > 0:
			return scaleSecsOrMs(d)
		case f.unfinished > 0 && startup:
			return "not after " + scaleSecs(f.unfinished)
		case f.unfinished > 0:
			return "not measured (in its first sync)"
		}
		return "-"
	}
	row := func(figure string, startup bool, get func(f *scaleFigures) time.Duration) {
		line := "SCALE-CMP: | " + figure + " |"
		for _, f := range all {
			line += " " + cell(f, get(f), startup) + " |"
		}
		fmt.Println(line)
	}
	row("start to all programmed", true, func(f *scaleFigures) time.Duration { return f.startAll })
	row("start-up full sync (daemon's histogram, IPv4)", false, func(f *scaleFigures) time.Duration { return f.startFull })
	row("full resync after the start-up (mean)", false, func(f *scaleFigures) time.Duration { return f.fullMean })
	row("one-endpoint change p50", false, func(f *scaleFigures) time.Duration { return scalePercentile(f.lat, 50) })
	row("one-endpoint change p99", false, func(f *scaleFigures) time.Duration { return scalePercentile(f.lat, 99) })
	row("one-endpoint change max", false, func(f *scaleFigures) time.Duration { return scaleMax(f.lat) })
	for _, f := range all {
		if f.changesNotAfter > 0 {
			fmt.Printf("SCALE-CMP: %s: change %d did not land by the bound of %s; the figures above are of the %d before it\n", f.name, len(f.lat)+1, scaleSecs(f.changesNotAfter), len(f.lat))
		}
	}
	cpuRow := func(figure string, get func(c scaleCPU) float64) {
		line := "SCALE-CMP: | " + figure + " |"
		for _, f := range all {
			if f.cpu.OK {
				line += fmt.Sprintf(" %.1f s |", get(f.cpu))
			} else {
				line += " - |"
			}
		}
		fmt.Println(line)
	}
	cpuRow("user CPU, start to programmed (with children)", scaleCPU.user)
	cpuRow("system CPU, start to programmed (with children)", scaleCPU.sys)
	line := "SCALE-CMP: | RSS at the end / peak |"
	for _, f := range all {
		line += fmt.Sprintf(" %.0f / %.0f MiB |", f.rss, f.hwm)
	}
	fmt.Println(line)
	for _, f := range all {
		fmt.Printf("SCALE-CMP: %s: %s\n", f.name, f.fullHow)
	}
	if floor != nil {
		fmt.Print("SCALE-CMP: kernel tools for the same content (wall, user, system):")
		for _, t := range floor.Tools {
			fmt.Printf(" %s %.1f s (%.1f, %.1f);", t.Name, t.Wall, t.User, t.Sys)
		}
		fmt.Printf(" IPVS + addresses + ipset %.1f s, IPVS + addresses + nft %.1f s\n", floor.total("ipset"), floor.total("nft"))
	}
	// The ratios issue 31 asks every run to print.
	for _, o := range all {
		if isUpstream(o.name) || o.startAll <= 0 {
			continue
		}
		var parts []string
		for _, u := range all {
			if !isUpstream(u.name) {
				continue
			}
			switch {
			case u.startAll > 0:
				parts = append(parts, fmt.Sprintf("ours / %s %.3f (start)", u.name, o.startAll.Seconds()/u.startAll.Seconds()))
			case u.unfinished > 0:
				parts = append(parts, fmt.Sprintf("ours / %s < %.3f (start; it had not finished)", u.name, o.startAll.Seconds()/u.unfinished.Seconds()))
			}
		}
		if floor != nil {
			sets := "ipset"
			if o.rulesBackend == "nftables" {
				sets = "nft"
			}
			parts = append(parts, fmt.Sprintf("ours / tools %.2f (IPVS + addresses + %s %.1f s)", o.startAll.Seconds()/floor.total(sets), sets, floor.total(sets)))
		}
		if o.cpu.OK {
			parts = append(parts, fmt.Sprintf("kernel's share of the start-up %.0f %% (system CPU %.1f s of %.1f s; user %.1f s)", 100*o.cpu.sys()/o.startAll.Seconds(), o.cpu.sys(), o.startAll.Seconds(), o.cpu.user()))
		}
		fmt.Printf("SCALE-RATIO: %s: %s\n", o.name, strings.Join(parts, "; "))
	}
}

// scaleWriteJSON writes the run to KPI_SCALE_JSON, if set.
func scaleWriteJSON(t *testing.T, all []*scaleFigures, floor *scaleFloor, nsvc, nchanges int, vmText, load string) {
	path := os.Getenv("KPI_SCALE_JSON")
	if path == "" {
		return
	}
	j := scaleJSON{Date: time.Now().UTC().Format(time.RFC3339), Commit: os.Getenv("KPI_SCALE_COMMIT"), Services: nsvc, Endpoints: scaleEndpoints,
		Changes: nchanges, VM: vmText, Load: load, Floor: floor}
	for _, f := range all {
		j.Columns = append(j.Columns, scaleToJSON(f))
	}
	data, err := json.MarshalIndent(j, "", "  ")
	if err == nil {
		err = os.WriteFile(path, append(data, '\n'), 0o644)
	}
	if err != nil {
		t.Errorf("writing KPI_SCALE_JSON=%s: %v", path, err)
	}
}

// scaleVMCPU describes, from the poller's "vm" and "self" lines, how busy the
// VM's vCPUs were from the poller's start to its end, and what the poller
// itself (a measuring cost every column pays alike) took of it; "" without them.
func scaleVMCPU(out string) string {
	var b strings.Builder
	for _, f := range scaleWaitLines(out, "vm") {
		if len(f) != 8 {
			continue
		}
		var v [8]float64
		total := 0.0
		for i := range v {
			n, _ := strconv.ParseFloat(f[i], 64)
			v[i] = n / 100
			total += v[i]
		}
		if total <= 0 {
			continue
		}
		idle := v[3] + v[4]
		fmt.Fprintf(&b, "the VM's vCPUs %.0f %% busy (user %.1f s, system %.1f s, softirq %.1f s, idle %.1f s of %.1f vCPU-s)",
			100*(total-idle)/total, v[0]+v[1], v[2]+v[5], v[6], idle, total)
	}
	for _, f := range scaleWaitLines(out, "self") {
		if len(f) != 4 {
			continue
		}
		var v [4]float64
		for i := range v {
			n, _ := strconv.ParseFloat(f[i], 64)
			v[i] = n / 100
		}
		if b.Len() > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "the poller's own CPU user %.1f s + system %.1f s (its ipset / iptables-save processes included)", v[0]+v[2], v[1]+v[3])
	}
	for _, f := range scaleWaitLines(out, "pace") {
		if len(f) == 2 {
			fmt.Fprintf(&b, "; its last waits %s ms between IPVS reads, %s ms between set reads", f[0], f[1])
		}
	}
	return b.String()
}

// scaleQuietMax bounds a column's cleanup; scaleQuietReboot the wait for its
// leftover processes, after which the VM boots again.
const (
	scaleQuietMax    = 30 * time.Minute
	scaleQuietReboot = 2 * time.Minute
)

// scaleWaiterBin is the poller's binary, written into the VM again after a reboot.
var scaleWaiterBin []byte

// rebootVM replaces the VM with a freshly booted one from the same files and
// sets its node up again: a kernel with nothing left running or locked in it.
// What a test wrote into the VM is gone.
func rebootVM(ctx context.Context) error {
	start := time.Now()
	vm.Stop()
	v, err := framework.BootVM(ctx, repoRoot, vmOpts, logf)
	if err != nil {
		return fmt.Errorf("booting the VM again: %w", err)
	}
	vm = v
	if node, err = framework.SetupNode(ctx, vm); err != nil {
		return err
	}
	logf("VM booted again in %s", time.Since(start).Round(time.Second))
	return nil
}

// scaleReboot boots the VM again (rebootVM) and puts the poller back.
func scaleReboot(ctx context.Context) error {
	if err := rebootVM(ctx); err != nil {
		return err
	}
	if err := vm.WriteFile(ctx, scaleWaiter, scaleWaiterBin, 0o755); err != nil {
		return fmt.Errorf("writing the poller into the VM again: %w", err)
	}
	if scaleWant != nil { // the floor reads it after the last column
		if err := vm.WriteFile(ctx, scaleWantPath, scaleWant, 0o644); err != nil {
			return fmt.Errorf("writing %s into the VM again: %w", scaleWantPath, err)
		}
	}
	scaleReboots++
	return nil
}

// scaleWantPath is, in the VM, every Service's virtual server and real servers
// as the last column left them (scaleWant): what the poller waits for and what
// the floor's tools write.
const scaleWantPath = "/tmp/scale-want.txt"

// scaleWant is the content of scaleWantPath, written again after a reboot.
var scaleWant []byte

// scaleReboots counts scaleReboot's boots in this run (KPI_SCALE_REBOOT adds
// one after every column).
var scaleReboots int

// scaleKernelWriters are the processes (by their 15-character comm) that write
// what a column measures: the daemons and the tools they run.
var scaleKernelWriters = map[string]bool{
	"kube-proxy": true, "kube-proxy-upst": true, "nft": true, "ipset": true, "ipvsadm": true,
	"iptables": true, "ip6tables": true, "iptables-restor": true, "ip6tables-resto": true,
	"iptables-nft-re": true, "ip6tables-nft-r": true, "iptables-legacy": true, "ip6tables-legac": true,
}

// scaleWaitQuiet waits until no kernel writer runs in the VM: a daemon killed in
// the middle of a large write can leave an nft or ipset child that goes on for
// minutes, holding the kernel's locks, and the next column would measure it (at
// 50,000 Services ours' first `ipset list` hung behind one for 15 minutes). When
// one is still there after scaleQuietReboot (upstream's nftables mode stopped at
// the bound at 50,000 Services left an `nft` in the kernel for over 20 minutes),
// it boots the VM again instead (scaleReboot), so the next column starts on a
// kernel with nothing in it.
func scaleWaitQuiet(t *testing.T, ctx context.Context, after string) {
	t.Helper()
	start := time.Now()
	var left []string
	for {
		out, err := vm.Sh(ctx, "ps -eo pid=,stat=,comm=")
		if err != nil {
			// The VM does not answer (or ps failed): waiting cannot help.
			t.Errorf("after %s: reading the VM's processes: %v", after, err)
			return
		}
		left = left[:0]
		for _, l := range strings.Split(out, "\n") {
			if f := strings.Fields(l); len(f) == 3 && scaleKernelWriters[f[2]] {
				left = append(left, strings.Join(f, " "))
			}
		}
		if len(left) == 0 {
			break
		}
		if time.Since(start) > scaleQuietReboot {
			logf("after %s: processes still running in the VM after %s (pid stat comm): %s; booting the VM again",
				after, scaleSecs(time.Since(start)), strings.Join(left, "; "))
			if err := scaleReboot(ctx); err != nil {
				t.Fatalf("after %s: %v", after, err)
			}
			return
		}
		time.Sleep(2 * time.Second)
	}
	if d := time.Since(start); d > 5*time.Second {
		logf("after %s: waited %s for leftover processes to end", after, scaleSecs(d))
	}
}
