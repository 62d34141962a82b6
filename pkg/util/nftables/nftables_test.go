package nftables

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"

	utilexec "k8s.io/utils/exec"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/testing/netns"
)

// TestIntegrationDeleteTable: in a private network namespace (tables made with the
// nft binary, deleted over netlink): upstream's nftables-mode tables go, another
// table in the same family stays, and deleting again reports that nothing was there.
func TestIntegrationDeleteTable(t *testing.T) {
	netns.Run(t, func(t *testing.T) {
		if _, err := exec.LookPath("nft"); err != nil {
			t.Fatalf("nft is not installed (hack/install-deps.sh installs it): %v", err)
		}
		for _, script := range []string{
			"add table ip kube-proxy",
			"add chain ip kube-proxy services { type nat hook prerouting priority -100 ; }",
			"add table ip6 kube-proxy",
			"add table ip other",
		} {
			if out, err := exec.Command("nft", strings.Fields(script)...).CombinedOutput(); err != nil {
				t.Fatalf("nft %s: %v: %s", script, err, out)
			}
		}
		ctx := context.Background()
		nft := New(&noExec{t: t}) // netlink only: no nft process
		for _, tbl := range []Table{{FamilyIPv4, "kube-proxy"}, {FamilyIPv6, "kube-proxy"}} {
			if existed, err := nft.DeleteTable(ctx, tbl); err != nil || !existed {
				t.Errorf("DeleteTable(%s) = %v, %v; want true, nil", tbl, existed, err)
			}
			if existed, err := nft.DeleteTable(ctx, tbl); err != nil || existed {
				t.Errorf("second DeleteTable(%s) = %v, %v; want false, nil", tbl, existed, err)
			}
		}
		out, err := exec.Command("nft", "list", "tables").CombinedOutput()
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.TrimSpace(string(out)); got != "table ip other" {
			t.Errorf("tables left: %q, want only \"table ip other\"", got)
		}
	})
}

// noExec fails the test when anything tries to run a process.
type noExec struct {
	utilexec.Interface
	t *testing.T
}

func (e *noExec) Command(cmd string, args ...string) utilexec.Cmd {
	e.t.Errorf("ran %s %v", cmd, args)
	return utilexec.New().Command("false")
}

func (e *noExec) CommandContext(ctx context.Context, cmd string, args ...string) utilexec.Cmd {
	e.t.Errorf("ran %s %v", cmd, args)
	return utilexec.New().CommandContext(ctx, "false")
}

func (e *noExec) LookPath(file string) (string, error) { return "/usr/sbin/" + file, nil }

// BenchmarkIntegrationDeleteTableBesideBigSet: removing upstream's table next to
// the rules backend's table with a 120,000-element set (10k Services x 10
// endpoints). `nft list tables` took 5-6 s here, reading every set's elements;
// the netlink listing reads table names only.
func BenchmarkIntegrationDeleteTableBesideBigSet(b *testing.B) {
	netns.RunBenchmark(b, func(b *testing.B) {
		ctx := context.Background()
		r, err := NewNetlink(Table{Family: FamilyInet, Name: "big"}, nil)
		if err != nil {
			b.Fatal(err)
		}
		set := Set{Name: "s", Key: []KeyType{KeyIPv4Addr, KeyInetProto, KeyInetService}}
		tx := NewTransaction()
		tx.AddTable()
		tx.AddSet(set)
		var elems [][]string
		for k := 0; k < 120000; k++ {
			elems = append(elems, []string{fmt.Sprintf("10.%d.%d.%d", 160+k/65536, (k/256)%256, k%256), "tcp", "80"})
		}
		tx.AddElements("s", elems...)
		if err := r.Run(ctx, tx); err != nil {
			b.Fatal(err)
		}
		nft := New(nil)
		b.ResetTimer()
		for range b.N {
			b.StopTimer()
			if out, err := exec.Command("nft", "add", "table", "ip6", "kube-proxy").CombinedOutput(); err != nil {
				b.Fatalf("%v: %s", err, out)
			}
			b.StartTimer()
			if existed, err := nft.DeleteTable(ctx, Table{FamilyIPv6, "kube-proxy"}); err != nil || !existed {
				b.Fatalf("DeleteTable = %v, %v", existed, err)
			}
		}
	})
}
