package ipvs

import (
	"context"
	"os"
	"testing"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/testing/netns"
)

// TestNewWithoutIPVS checks that a kernel without IPVS is a clean error from New
// rather than a panic or a handle that silently talks to generic netlink family 0
// (moby/ipvs caches a failed family lookup). On a kernel with IPVS it checks the
// handle works instead. Either way it runs in a private network namespace.
func TestNewWithoutIPVS(t *testing.T) {
	netns.Run(t, func(t *testing.T) {
		_, statErr := os.Stat("/proc/net/ip_vs")
		c, err := New("")
		if statErr != nil {
			if err == nil {
				c.Close()
				t.Fatal("New succeeded on a kernel without IPVS")
			}
			t.Logf("no IPVS in this kernel, New said: %v", err)
			return
		}
		if err != nil {
			t.Fatalf("New on a kernel with IPVS: %v", err)
		}
		defer c.Close()
		if _, err := c.GetVirtualServers(context.Background()); err != nil {
			t.Fatalf("GetVirtualServers: %v", err)
		}
	})
}
