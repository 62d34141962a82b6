package ipvs

// Test addresses: the ClusterIPs 10.96.0.10 and fd00:10:96::10, bound to lo inside
// the test's own network namespace.

import (
	"errors"
	"net"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	utilexec "k8s.io/utils/exec"

	nftrules "github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/ipvs/rules/nftables"
	nft "github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/nftables"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/testing/netns"
)

// TestIntegrationNFTLiveness: in the kernel's nftables, a table our daemon no
// longer renews stops acting when its liveness element lapses. A ClusterIP is a
// local address with a listener on a port its Service does not have (a recycled
// ClusterIP whose new Service another kube-proxy serves): while the element lives,
// ipvs-filter rejects the SYN; once it has lapsed (3 s here), the SYN reaches the
// listener, without anything of ours being written. A running daemon that finds
// the element gone makes a full sync, which turns the rules on again.
func TestIntegrationNFTLiveness(t *testing.T) {
	netns.Run(t, func(t *testing.T) {
		const lifetime = 3 * time.Second
		t.Setenv(nftrules.EnvLivenessTimeout, lifetime.String())
		rs, err := nft.NewNetlink(nftrules.Table(), utilexec.New())
		if err != nil {
			t.Fatal(err)
		}
		lo, err := netlink.LinkByName("lo")
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			family v1.IPFamily
			vip    string
		}{{v1.IPv4Protocol, "10.96.0.10"}, {v1.IPv6Protocol, "fd00:10:96::10"}} {
			t.Run(string(c.family), func(t *testing.T) {
				a := netip.MustParseAddr(c.vip)
				// No duplicate address detection: the address is usable at once.
				addr := &netlink.Addr{IPNet: &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(a.BitLen(), a.BitLen())}, Flags: unix.IFA_F_NODAD}
				if err := netlink.AddrAdd(lo, addr); err != nil {
					t.Fatal(err)
				}
				ln, err := net.Listen("tcp", net.JoinHostPort(c.vip, "8080"))
				if err != nil {
					t.Fatal(err)
				}
				defer ln.Close()
				go func() {
					for {
						conn, err := ln.Accept()
						if err != nil {
							return
						}
						conn.Close()
					}
				}()
				connect := func() error {
					conn, err := net.DialTimeout("tcp", ln.Addr().String(), 2*time.Second)
					if err == nil {
						conn.Close()
					}
					return err
				}
				// A new namespace's IPv6 can take a moment to route a new address.
				if !waitFor(5*time.Second, func() bool { return connect() == nil }) {
					t.Fatalf("before our rules: %v", connect())
				}

				ep := "10.244.1.5"
				if c.family == v1.IPv6Protocol {
					ep = "fd00:10:244::5"
				}
				e := newNFTEnv(t, c.family, rs)
				e.start(makeService("ns", "web", clusterIP(c.vip), port("http", v1.ProtocolTCP, 80, 0)),
					makeSlice("ns", "web", "web-1", tcp("http", 8080), endpoint(ep)))
				written := time.Now()
				if err := connect(); !errors.Is(err, syscall.ECONNREFUSED) {
					t.Fatalf("while our rules live, a SYN to %s on a port its Service lacks: %v, want it refused", ln.Addr(), err)
				}
				// A SYN refused (or, ICMP being rate limited, dropped) before the
				// lapse is sent again a second later: what counts is when one got in.
				var through time.Duration
				if !waitFor(lifetime+5*time.Second, func() bool {
					err := connect()
					through = time.Since(written)
					return err == nil
				}) {
					t.Fatalf("the SYN is still refused %v after the last renewal (lifetime %v)", time.Since(written), lifetime)
				}
				t.Logf("%s: refused while the element lived, answered %v after it was written (lifetime %v)", c.vip, through.Round(10*time.Millisecond), lifetime)
				// written is taken after the write returned; the kernel counts in jiffies.
				if through < lifetime-250*time.Millisecond {
					t.Errorf("answered %v after the renewal, before the lifetime %v ran out", through, lifetime)
				}

				// The daemon runs on: the loop's renewal finds the element gone, and a
				// full sync turns the rules on again.
				e.clock.Step(lifetime)
				if st := e.mustSync(); !st.Full {
					t.Errorf("the sync that found the element gone was not full")
				}
				if err := connect(); !errors.Is(err, syscall.ECONNREFUSED) {
					t.Errorf("after the full sync: %v, want the SYN refused again", err)
				}
			})
		}
	})
}
