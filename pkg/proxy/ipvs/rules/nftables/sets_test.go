package nftables

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/ipvs/rules"
	nft "github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/nftables"
)

// nftLoaded returns a Fake holding the IPv4 programme and no elements.
func nftLoaded(t *testing.T) *nft.FakeRuleset {
	t.Helper()
	p, err := buildNFTProgramme(nftProgrammeInputs()[0])
	if err != nil {
		t.Fatal(err)
	}
	fake := nft.NewFakeRuleset(nftTable)
	tx := nft.NewTransaction()
	p.writeAll(tx)
	if err := fake.Run(context.Background(), tx); err != nil {
		t.Fatal(err)
	}
	return fake
}

func elementLines(t *testing.T, r nft.Ruleset) []string {
	t.Helper()
	d, err := r.Dump(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range strings.Split(d, "\n") {
		if strings.HasPrefix(l, "element ") {
			out = append(out, l)
		}
	}
	return out
}

func TestNFTDesiredElements(t *testing.T) {
	f := newNFTFamily(v1.IPv4Protocol)
	got, errs := nftDesiredElements(f, []rules.Member{
		member(rules.ClusterIP, "10.96.0.1,tcp:443"),
		member(rules.NodePortTCP, "30080"),
		member(rules.LoadBalancerSourceCIDR, "192.0.2.10,tcp:80,10.0.0.0/8"),
		member(rules.LoadBalancerSourceIP, "192.0.2.10,tcp:80,10.1.2.3"), // inside the range
		{Set: 0, Port: 1}, // no set: left out alone
	})
	if len(errs) != 1 {
		t.Fatalf("errors %v, want the member of no set", errs)
	}
	want := nftElements{
		"ip-cluster-ip":           {"10.96.0.1 . tcp . 443": {"10.96.0.1", "tcp", "443"}},
		"ip-node-port":            {"tcp . 30080": {"tcp", "30080"}},
		"ip-load-balancer-source": {"192.0.2.10 . tcp . 80 . 10.0.0.0/8": {"192.0.2.10", "tcp", "80", "10.0.0.0/8"}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
}

// TestNFTChangesNarrowARange: a source range narrowed from 10.0.0.0/8 to
// 10.1.0.0/16 is a delete and an add that overlap; the delete goes first, in the
// same transaction, so the kernel never sees both.
func TestNFTChangesNarrowARange(t *testing.T) {
	fake := nftLoaded(t)
	f := newNFTFamily(v1.IPv4Protocol)
	before, _ := nftDesiredElements(f, []rules.Member{member(rules.LoadBalancerSourceCIDR, "192.0.2.10,tcp:80,10.0.0.0/8")})
	after, _ := nftDesiredElements(f, []rules.Member{member(rules.LoadBalancerSourceCIDR, "192.0.2.10,tcp:80,10.1.0.0/16")})
	for _, step := range []struct{ have, want nftElements }{{nftElements{}, before}, {before, after}} {
		refused, err := nftApplyChanges(context.Background(), fake, nftElementChanges(step.have, step.want), 5)
		if err != nil || len(refused) > 0 {
			t.Fatalf("refused %v, %v", refused, err)
		}
	}
	if got := elementLines(t, fake); !cmp.Equal(got, []string{"element ip-load-balancer-source 192.0.2.10 . tcp . 80 . 10.1.0.0/16"}) {
		t.Fatalf("elements %q", got)
	}
	if fake.Transactions != 3 { // the programme, then one per step
		t.Errorf("%d transactions, want 3: nothing was split", fake.Transactions)
	}
}

// TestNFTApplyIsolatesRefusals: an element the kernel refuses (deleting one that
// is not there, adding a range that overlaps one written by someone else) is
// returned alone; every other change is written.
func TestNFTApplyIsolatesRefusals(t *testing.T) {
	fake := nftLoaded(t)
	ctx := context.Background()
	tx := nft.NewTransaction()
	tx.AddElements("ip-load-balancer-source", []string{"192.0.2.10", "tcp", "80", "10.0.0.0/8"})
	if err := fake.Run(ctx, tx); err != nil {
		t.Fatal(err)
	}
	var changes []nftChange
	for i := range 20 {
		changes = append(changes, nftChange{add: true, set: "ip-cluster-ip", fields: []string{"10.96.0." + strconv.Itoa(i+1), "tcp", "80"}})
	}
	badDel := nftChange{set: "ip-cluster-ip", fields: []string{"10.96.1.1", "tcp", "80"}}
	badAdd := nftChange{add: true, set: "ip-load-balancer-source", fields: []string{"192.0.2.10", "tcp", "80", "10.1.0.0/16"}}
	changes = append(changes[:7], append([]nftChange{badDel}, changes[7:]...)...)
	changes = append(changes, badAdd)
	refused, err := nftApplyChanges(ctx, fake, changes, 5)
	if err != nil {
		t.Fatal(err)
	}
	if len(refused) != 2 || refused[0].change.String() != badDel.String() || !errors.Is(refused[0].err, unix.ENOENT) ||
		refused[1].change.String() != badAdd.String() || !errors.Is(refused[1].err, unix.EEXIST) {
		t.Fatalf("refused %v", refused)
	}
	got := elementLines(t, fake)
	if len(got) != 21 { // 20 cluster IPs + the range that was there
		t.Fatalf("%d elements written, want 21: %q", len(got), got)
	}
	// Beyond the bound the refusals are the table's problem, not the elements'.
	var missing []nftChange
	for i := range 10 {
		missing = append(missing, nftChange{set: "ip-cluster-ip", fields: []string{"10.96.2." + strconv.Itoa(i+1), "tcp", "80"}})
	}
	if _, err := nftApplyChanges(ctx, fake, missing, 3); !errors.Is(err, errTooManyRefused) {
		t.Fatalf("10 refusals with a bound of 3: %v", err)
	}
}

// TestNFTChangesTransactionGroupsBySet: changes interleaved across sets become
// one operation per set and direction, deletions first, each keeping its
// changes' order.
func TestNFTChangesTransactionGroupsBySet(t *testing.T) {
	c := func(add bool, set string, fields ...string) nftChange {
		return nftChange{add: add, set: set, fields: fields}
	}
	tx := nftChangesTransaction([]nftChange{
		c(true, "ip-cluster-ip", "10.96.0.1", "tcp", "80"),
		c(true, "ip-loop-back", "10.0.0.1", "tcp", "80", "10.0.0.1"),
		c(false, "ip-loop-back", "10.0.0.9", "tcp", "80", "10.0.0.9"),
		c(true, "ip-cluster-ip", "10.96.0.2", "tcp", "80"),
		c(true, "ip-loop-back", "10.0.0.2", "tcp", "80", "10.0.0.2"),
		c(false, "ip-cluster-ip", "10.96.0.9", "tcp", "80"),
	})
	want := `delete element ip-loop-back { 10.0.0.9 . tcp . 80 . 10.0.0.9 }
delete element ip-cluster-ip { 10.96.0.9 . tcp . 80 }
add element ip-cluster-ip { 10.96.0.1 . tcp . 80, 10.96.0.2 . tcp . 80 }
add element ip-loop-back { 10.0.0.1 . tcp . 80 . 10.0.0.1, 10.0.0.2 . tcp . 80 . 10.0.0.2 }
`
	if got := tx.String(); got != want {
		t.Fatalf("transaction:\n%s\nwant:\n%s", got, want)
	}
}
