package nftables

import (
	"context"
	"encoding/binary"
	"net/netip"
	"os"
	"strconv"
	"testing"
	"time"

	gnft "github.com/google/nftables"
	"sigs.k8s.io/knftables"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/testing/netns"
)

// TestIntegrationOneElementTransaction measures what issue 16 asks to choose the
// nftables library by: a transaction that adds one element to a concatenated
// set (address . protocol . port), the write a new Service costs. It runs the
// same n transactions through sigs.k8s.io/knftables (one nft process each) and
// github.com/google/nftables (one netlink batch each) in a fresh namespace,
// reads every element back through the other library, and logs the mean time.
// KPI_NFT_TRANSACTIONS sets n (default 50).
func TestIntegrationOneElementTransaction(t *testing.T) {
	netns.Run(t, func(t *testing.T) {
		n := 50
		if v := os.Getenv("KPI_NFT_TRANSACTIONS"); v != "" {
			var err error
			if n, err = strconv.Atoi(v); err != nil || n < 1 {
				t.Fatalf("KPI_NFT_TRANSACTIONS=%q: want a positive number", v)
			}
		}
		ctx := context.Background()
		const setType = "ipv4_addr . inet_proto . inet_service"
		addr := func(i int) netip.Addr {
			return netip.AddrFrom4([4]byte{10, 96, byte(i >> 8), byte(i)})
		}

		// knftables: table "kpi-choice-k".
		k, err := knftables.New(knftables.IPv4Family, "kpi-choice-k")
		if err != nil {
			t.Fatalf("knftables.New: %v", err)
		}
		tx := k.NewTransaction()
		tx.Add(&knftables.Table{})
		tx.Add(&knftables.Set{Name: "svc", Type: setType})
		if err := k.Run(ctx, tx); err != nil {
			t.Fatalf("knftables: creating the table: %v", err)
		}
		start := time.Now()
		for i := range n {
			tx := k.NewTransaction()
			tx.Add(&knftables.Element{Set: "svc", Key: []string{addr(i).String(), "tcp", "80"}})
			if err := k.Run(ctx, tx); err != nil {
				t.Fatalf("knftables: element %d: %v", i, err)
			}
		}
		perK := time.Since(start) / time.Duration(n)

		// google/nftables: table "kpi-choice-g", same set, on one netlink socket.
		c, err := gnft.New(gnft.AsLasting())
		if err != nil {
			t.Fatalf("google/nftables: %v", err)
		}
		defer c.CloseLasting()
		table := c.AddTable(&gnft.Table{Family: gnft.TableFamilyIPv4, Name: "kpi-choice-g"})
		set := &gnft.Set{Table: table, Name: "svc", Concatenation: true,
			KeyType: gnft.MustConcatSetType(gnft.TypeIPAddr, gnft.TypeInetProto, gnft.TypeInetService)}
		if err := c.AddSet(set, nil); err != nil {
			t.Fatalf("google/nftables: AddSet: %v", err)
		}
		if err := c.Flush(); err != nil {
			t.Fatalf("google/nftables: creating the table: %v", err)
		}
		start = time.Now()
		for i := range n {
			if err := c.SetAddElements(set, []gnft.SetElement{{Key: concatKey(addr(i), 6, 80)}}); err != nil {
				t.Fatalf("google/nftables: element %d: %v", i, err)
			}
			if err := c.Flush(); err != nil {
				t.Fatalf("google/nftables: element %d: %v", i, err)
			}
		}
		perG := time.Since(start) / time.Duration(n)

		// Each library reads what the other wrote: the elements are really there.
		kg, err := knftables.New(knftables.IPv4Family, "kpi-choice-g")
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range []struct {
			nft  knftables.Interface
			what string
		}{{k, "knftables"}, {kg, "google/nftables"}} {
			elems, err := r.nft.ListElements(ctx, "set", "svc")
			if err != nil {
				t.Fatalf("listing what %s wrote: %v", r.what, err)
			}
			if len(elems) != n {
				t.Fatalf("%s wrote %d elements, the kernel holds %d", r.what, n, len(elems))
			}
		}
		gk, err := c.GetSetElements(&gnft.Set{Table: &gnft.Table{Family: gnft.TableFamilyIPv4, Name: "kpi-choice-k"}, Name: "svc",
			Concatenation: true, KeyType: set.KeyType})
		if err != nil {
			t.Fatalf("google/nftables reading knftables' set: %v", err)
		}
		if len(gk) != n {
			t.Fatalf("knftables wrote %d elements, google/nftables reads %d", n, len(gk))
		}
		t.Logf("one-element transaction, mean of %d: knftables (nft process) %v, google/nftables (netlink) %v, ratio %.1fx",
			n, perK.Round(time.Microsecond), perG.Round(time.Microsecond), float64(perK)/float64(perG))
	})
}

// concatKey is the kernel's layout of an ipv4_addr . inet_proto . inet_service
// key: each field in network byte order, padded to a 4-byte register.
func concatKey(a netip.Addr, proto byte, port uint16) []byte {
	k := make([]byte, 12)
	copy(k, a.AsSlice())
	k[4] = proto
	binary.BigEndian.PutUint16(k[8:], port)
	return k
}
