//go:build vmtest

package netlink

import (
	"context"
	"testing"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/testing/netns"
)

// TestVMBindRefusalContract: the kernel's bind refusals on the (down) dummy
// kube-ipvs0, the table TestFakeBindRefusalContract runs.
func TestVMBindRefusalContract(t *testing.T) {
	netns.Run(t, func(t *testing.T) {
		c, err := New()
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.EnsureDummyDevice(context.Background(), DefaultDummyDevice); err != nil {
			t.Fatal(err)
		}
		checkBindRefusalContract(t, c, DefaultDummyDevice)
	})
}
