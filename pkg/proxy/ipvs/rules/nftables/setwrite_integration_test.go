package nftables

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	utilexec "k8s.io/utils/exec"

	nft "github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/nftables"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/testing/netns"
)

// TestIntegrationNFTSetWriteCost writes N Services' worth of elements (one
// cluster-ip element and four loop-back elements each, the content of a
// Services x 4 start-up) the way a first sync does, through nftApplyChanges,
// in a fresh namespace; then the same content with `nft -f` into a second
// table. Both must hold every element; the times, this process's CPU and
// allocations are logged (KPI_NFT_SERVICES sets N, default 2,000).
func TestIntegrationNFTSetWriteCost(t *testing.T) {
	netns.Run(t, func(t *testing.T) {
		n := 2000
		if v := os.Getenv("KPI_NFT_SERVICES"); v != "" {
			var err error
			if n, err = strconv.Atoi(v); err != nil || n < 1 || n > 1<<20 {
				t.Fatalf("KPI_NFT_SERVICES=%q: want a positive number", v)
			}
		}
		ctx := context.Background()
		r, err := nft.NewNetlink(nftTable, utilexec.New())
		if err != nil {
			t.Fatal(err)
		}
		f := newNFTFamily("IPv4")
		tx := nft.NewTransaction()
		tx.AddTable()
		for _, s := range nftSetTable[:2] {
			tx.AddSet(f.set(s))
		}
		if err := r.Run(ctx, tx); err != nil {
			t.Fatal(err)
		}
		changes := setWriteContent(f, n)

		var ms0, ms1 runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&ms0)
		cpu0 := selfCPU()
		start := time.Now()
		refused, err := nftApplyChanges(ctx, r, changes, 0)
		took := time.Since(start)
		cpu := selfCPU() - cpu0
		runtime.ReadMemStats(&ms1)
		if err != nil || len(refused) > 0 {
			t.Fatalf("writing %d elements: %v, refused %v", len(changes), err, refused)
		}
		for _, s := range []string{"ip-cluster-ip", "ip-loop-back"} {
			elems, err := r.ListElements(ctx, s)
			if want := map[bool]int{true: n, false: 4 * n}[s == "ip-cluster-ip"]; err != nil || len(elems) != want {
				t.Fatalf("%s holds %d elements (%v), want %d", s, len(elems), err, want)
			}
		}
		// One operation per element cost 6-11 KiB and 70-100 allocations an
		// element (2.7 GiB at 250,000): a run of a set's changes is one operation.
		perElem := (ms1.TotalAlloc - ms0.TotalAlloc) / uint64(len(changes))
		if perElem > 2048 || (ms1.Mallocs-ms0.Mallocs)/uint64(len(changes)) > 40 {
			t.Errorf("writing %d elements allocated %d bytes and %d times an element, want at most 2,048 and 40",
				len(changes), perElem, (ms1.Mallocs-ms0.Mallocs)/uint64(len(changes)))
		}
		t.Logf("ours: %d elements in %s (CPU user+system %s), %d MiB allocated, %d allocations",
			len(changes), took.Round(time.Millisecond), cpu.Round(time.Millisecond),
			(ms1.TotalAlloc-ms0.TotalAlloc)>>20, ms1.Mallocs-ms0.Mallocs)

		// The same content with nft -f, into a table of its own.
		var b strings.Builder
		b.WriteString("table inet kpi-tool {\n")
		b.WriteString("set cluster-ip { type ipv4_addr . inet_proto . inet_service; }\n")
		b.WriteString("set loop-back { type ipv4_addr . inet_proto . inet_service . ipv4_addr; }\n}\n")
		for _, c := range changes {
			fmt.Fprintf(&b, "add element inet kpi-tool %s { %s }\n", strings.TrimPrefix(c.set, "ip-"), strings.Join(c.fields, " . "))
		}
		file := t.TempDir() + "/content.nft"
		if err := os.WriteFile(file, []byte(b.String()), 0o600); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("nft", "-f", file)
		start = time.Now()
		out, err := cmd.CombinedOutput()
		tool := time.Since(start)
		if err != nil {
			t.Fatalf("nft -f: %v %s", err, out)
		}
		ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
		t.Logf("nft -f: the same in %s (CPU user+system %s); ours / nft -f = %.2f",
			tool.Round(time.Millisecond), (time.Duration(ru.Utime.Nano()) + time.Duration(ru.Stime.Nano())).Round(time.Millisecond),
			took.Seconds()/tool.Seconds())
	})
}

// setWriteContent is a start-up's element changes for n Services x 4
// endpoints, in the order applySets sends them.
func setWriteContent(f nftFamily, n int) []nftChange {
	var out []nftChange
	for i := range n {
		vip := fmt.Sprintf("10.96.%d.%d", i>>8, i&255)
		out = append(out, nftChange{add: true, set: f.name("cluster-ip"), fields: []string{vip, "tcp", "80"}})
		for e := range 4 {
			ep := fmt.Sprintf("10.%d.%d.%d", 128+e, i>>8, i&255)
			out = append(out, nftChange{add: true, set: f.name("loop-back"), fields: []string{ep, "tcp", "8080", ep}})
		}
	}
	return out
}

// selfCPU is this process's user and system CPU time so far.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano()) + time.Duration(ru.Stime.Nano())
}
