package nftables

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	utilexec "k8s.io/utils/exec"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/testing/netns"
)

// TestIntegrationConformance runs the conformance scenarios against the kernel's
// nf_tables over netlink in a fresh namespace, each beside the Fake: every step
// must fail with the same errno and leave the same table (`nft list table`,
// parsed) in both.
func TestIntegrationConformance(t *testing.T) {
	netns.Run(t, func(t *testing.T) {
		var uts unix.Utsname
		if err := unix.Uname(&uts); err != nil {
			t.Fatal(err)
		}
		runConformance(t, unix.ByteSliceToString(uts.Release[:]), func(t *testing.T) Ruleset {
			r, err := NewNetlink(conformanceTable, utilexec.New())
			if err != nil {
				t.Fatal(err)
			}
			// Every scenario starts without the table.
			tx := NewTransaction()
			tx.AddTable()
			tx.DeleteTable()
			if err := r.Run(context.Background(), tx); err != nil {
				t.Fatalf("removing the table: %v", err)
			}
			return r
		})
	})
}

// TestIntegrationLargeTransaction writes 100,000 elements in one transaction (49
// messages in one batch, far past the default socket buffers), reads them back,
// and deletes half in a second transaction: the sizes a 100k-Service node needs.
func TestIntegrationLargeTransaction(t *testing.T) {
	netns.Run(t, func(t *testing.T) {
		ctx := context.Background()
		r, err := NewNetlink(conformanceTable, utilexec.New())
		if err != nil {
			t.Fatal(err)
		}
		const n = 100000
		key := func(i int) []string {
			return []string{fmt.Sprintf("10.%d.%d.%d", i>>16, (i>>8)&255, i&255), "tcp", strconv.Itoa(1 + i%65535)}
		}
		tx := NewTransaction()
		tx.AddTable()
		tx.AddSet(setSvc)
		for i := range n {
			tx.AddElements("svc", key(i))
		}
		start := time.Now()
		if err := r.Run(ctx, tx); err != nil {
			t.Fatal(err)
		}
		write := time.Since(start)
		start = time.Now()
		got, err := r.ListElements(ctx, "svc")
		if err != nil {
			t.Fatal(err)
		}
		read := time.Since(start)
		if len(got) != n {
			t.Fatalf("the kernel holds %d elements, want %d", len(got), n)
		}
		tx = NewTransaction()
		for i := 0; i < n; i += 2 {
			tx.DeleteElements("svc", key(i))
		}
		start = time.Now()
		if err := r.Run(ctx, tx); err != nil {
			t.Fatal(err)
		}
		del := time.Since(start)
		if got, err = r.ListElements(ctx, "svc"); err != nil || len(got) != n/2 {
			t.Fatalf("after deleting half: %d elements, %v", len(got), err)
		}
		t.Logf("%d elements: one transaction %v, read back %v, deleting half %v", n, write.Round(time.Millisecond), read.Round(time.Millisecond), del.Round(time.Millisecond))
	})
}
