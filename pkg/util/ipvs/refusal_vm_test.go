//go:build vmtest

package ipvs

import (
	"testing"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/testing/netns"
)

// TestVMRefusalContract: the kernel's refusals, the same table as
// TestFakeRefusalContract, in a fresh namespace holding only lo (up).
func TestVMRefusalContract(t *testing.T) {
	netns.Run(t, func(t *testing.T) { checkRefusalContract(t, newVMClient(t)) })
}
