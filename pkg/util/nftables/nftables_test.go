package nftables

import (
	"context"
	"os/exec"
	"strings"
	"testing"

	utilexec "k8s.io/utils/exec"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/testing/netns"
)

func TestHasTable(t *testing.T) {
	listing := []byte("table ip filter\ntable ip kube-proxy\ntable inet kube-proxy\ntable ip6 kube-proxy-x\n")
	for _, c := range []struct {
		t    Table
		want bool
	}{
		{Table{FamilyIPv4, "kube-proxy"}, true},
		{Table{FamilyIPv6, "kube-proxy"}, false}, // only "kube-proxy-x" and the inet family
		{Table{FamilyIPv4, "kube"}, false},
	} {
		if got := hasTable(listing, c.t); got != c.want {
			t.Errorf("hasTable(%s) = %v, want %v", c.t, got, c.want)
		}
	}
}

// TestIntegrationDeleteTable: in a private network namespace, the real nft:
// upstream's nftables-mode tables go, another table in the same family stays, and
// deleting again reports that nothing was there.
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
		nft := New(utilexec.New())
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
