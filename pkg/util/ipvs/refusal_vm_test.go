//go:build vmtest

package ipvs

import (
	"context"
	"net"
	"testing"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/testing/netns"
	vnl "github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// TestVMRefusalContract: the kernel's refusals, the same table as
// TestFakeRefusalContract, in a fresh namespace holding only lo (up).
func TestVMRefusalContract(t *testing.T) {
	netns.Run(t, func(t *testing.T) { checkRefusalContract(t, newVMClient(t)) })
}

// TestVMRefusalDependsOnRoutes: what the Fake does not model, because the
// kernel decides it from the namespace's routes. With 192.0.2.1/24 and
// fe80::5 bound to an up link, 192.0.2.255 is a broadcast address of the
// local table (EINVAL) and fe80::5, a local address, is accepted; 192.0.2.7
// and fe80::6 behave as without the link.
func TestVMRefusalDependsOnRoutes(t *testing.T) {
	netns.Run(t, func(t *testing.T) {
		link := &vnl.Dummy{LinkAttrs: vnl.LinkAttrs{Name: "node0"}}
		if err := vnl.LinkAdd(link); err != nil {
			t.Fatal(err)
		}
		for _, s := range []string{"192.0.2.1/24", "fe80::5/64"} {
			a, err := vnl.ParseAddr(s)
			if err != nil {
				t.Fatal(err)
			}
			a.Flags = unix.IFA_F_NODAD
			if err := vnl.AddrAdd(link, a); err != nil {
				t.Fatal(err)
			}
		}
		if err := vnl.LinkSetUp(link); err != nil {
			t.Fatal(err)
		}
		c := newVMClient(t)
		ctx := context.Background()
		base4, base6 := refusalVS("10.0.0.1"), refusalVS("fd00::1")
		for _, vs := range []*VirtualServer{base4, base6} {
			expectKind(t, "add "+vs.Key(), c.AddVirtualServer(ctx, vs), "ok")
		}
		for _, tc := range []struct {
			vs   *VirtualServer
			ip   string
			want string
		}{
			{base4, "192.0.2.255", "einval"},
			{base4, "192.0.2.7", "ok"},
			{base6, "fe80::5", "ok"},
			{base6, "fe80::6", "einval"},
		} {
			rs := &RealServer{Address: net.ParseIP(tc.ip), Port: 80, Weight: 1}
			expectKind(t, "add real server "+tc.ip, c.AddRealServer(ctx, tc.vs, rs), tc.want)
			f := NewFake()
			if err := f.AddVirtualServer(ctx, tc.vs); err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: kernel %s, Fake %s", tc.ip, tc.want, errKind(f.AddRealServer(ctx, tc.vs, rs)))
		}
	})
}
