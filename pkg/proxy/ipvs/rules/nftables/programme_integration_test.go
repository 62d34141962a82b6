package nftables

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	utilexec "k8s.io/utils/exec"

	nft "github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/nftables"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/testing/netns"
)

// TestIntegrationNFTProgramme loads both families' nftables programme with an
// element in every set into the kernel, in a fresh namespace, and beside it into
// the Fake: the kernel accepts every rule, and `nft list table` shows what the
// Fake holds.
func TestIntegrationNFTProgramme(t *testing.T) {
	netns.Run(t, func(t *testing.T) {
		real, err := nft.NewNetlink(nftTable, utilexec.New())
		if err != nil {
			t.Fatal(err)
		}
		fake := nft.NewFakeRuleset(nftTable)
		loadNFTProgramme(t, real)
		loadNFTProgramme(t, fake)
		got, err := real.Dump(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		want, _ := fake.Dump(context.Background())
		if diff := cmp.Diff(got, want); diff != "" {
			t.Fatalf("the Fake differs from the kernel (-kernel +fake):\n%s", diff)
		}
	})
}
