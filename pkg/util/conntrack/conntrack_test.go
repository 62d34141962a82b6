package conntrack

import (
	"context"
	"net"
	"os/exec"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/testing/netns"
	"golang.org/x/sys/unix"
)

func run(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%v: %v\n%s", args, err, out)
	}
}

// udpEcho answers every datagram on addr until the test ends.
func udpEcho(t *testing.T, network, addr string) {
	t.Helper()
	pc, err := net.ListenPacket(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			_, _ = pc.WriteTo(buf[:n], from)
		}
	}()
}

// udpExchange sends one datagram from local to remote and waits for the echo, so
// the conntrack entry has seen both directions.
func udpExchange(t *testing.T, network, local, remote string) {
	t.Helper()
	laddr, err := net.ResolveUDPAddr(network, local)
	if err != nil {
		t.Fatal(err)
	}
	raddr, err := net.ResolveUDPAddr(network, remote)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.DialUDP(network, laddr, raddr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 16)
	if _, err := conn.Read(buf); err != nil {
		t.Fatalf("no echo from %s to %s: %v", remote, local, err)
	}
}

// tcpConnect opens a TCP connection from local to remote and keeps it open until
// the test ends.
func tcpConnect(t *testing.T, local, remote string) {
	t.Helper()
	ln, err := net.Listen("tcp", remote)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	laddr, err := net.ResolveTCPAddr("tcp", local)
	if err != nil {
		t.Fatal(err)
	}
	d := net.Dialer{LocalAddr: laddr, Timeout: 5 * time.Second}
	conn, err := d.Dial("tcp", remote)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	srv, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
}

// TestIntegrationConntrack makes the kernel track real flows in a private network
// namespace (an iptables DNAT rule turns conntrack on there and gives flow C the
// shape of a service flow: original destination 127.0.0.2:53, reply source the
// "endpoint" 127.0.0.1:5353), then lists and deletes them through ctnetlink.
func TestIntegrationConntrack(t *testing.T) {
	netns.Run(t, func(t *testing.T) {
		run(t, "iptables", "-w", "-t", "nat", "-A", "OUTPUT", "-p", "udp", "-d", "127.0.0.2", "--dport", "53",
			"-j", "DNAT", "--to-destination", "127.0.0.1:5353")
		udpEcho(t, "udp4", "127.0.0.1:5353")
		udpExchange(t, "udp4", "127.0.0.1:40001", "127.0.0.1:5353")
		udpExchange(t, "udp4", "127.0.0.1:40002", "127.0.0.1:5353")
		udpExchange(t, "udp4", "127.0.0.1:40003", "127.0.0.2:53")
		tcpConnect(t, "127.0.0.1:40004", "127.0.0.1:8080")

		c, err := New(unix.AF_INET)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		checkContract(t, c)
	})
}

// TestIntegrationConntrackFamilies checks that a client sees and deletes only the
// entries of its own family.
func TestIntegrationConntrackFamilies(t *testing.T) {
	netns.Run(t, func(t *testing.T) {
		run(t, "iptables", "-w", "-A", "OUTPUT", "-m", "conntrack", "--ctstate", "NEW,ESTABLISHED", "-j", "ACCEPT")
		run(t, "ip6tables", "-w", "-A", "OUTPUT", "-m", "conntrack", "--ctstate", "NEW,ESTABLISHED", "-j", "ACCEPT")
		udpEcho(t, "udp4", "127.0.0.1:5353")
		udpEcho(t, "udp6", "[::1]:5353")
		udpExchange(t, "udp4", "127.0.0.1:40001", "127.0.0.1:5353")
		udpExchange(t, "udp6", "[::1]:40001", "[::1]:5353")

		v4, err := New(unix.AF_INET)
		if err != nil {
			t.Fatal(err)
		}
		defer v4.Close()
		v6, err := New(unix.AF_INET6)
		if err != nil {
			t.Fatal(err)
		}
		defer v6.Close()
		ctx := context.Background()
		if diff := cmp.Diff([]Flow{flowA}, listSorted(t, v4, ProtocolUDP)); diff != "" {
			t.Errorf("IPv4 UDP flows (-want +got):\n%s", diff)
		}
		six := net.ParseIP("::1")
		flow6 := Flow{Protocol: ProtocolUDP, OrigSrc: six, OrigDst: six, OrigSrcPort: 40001, OrigDstPort: 5353, ReplySrc: six, ReplySrcPort: 5353}
		if diff := cmp.Diff([]Flow{flow6}, listSorted(t, v6, ProtocolUDP)); diff != "" {
			t.Errorf("IPv6 UDP flows (-want +got):\n%s", diff)
		}
		// The IPv4 client cannot delete the IPv6 flow, the IPv6 client can.
		if n, err := v4.DeleteFlows(ctx, []Flow{flow6}); err != nil || n != 0 {
			t.Errorf("IPv4 DeleteFlows(v6 flow) = %d, %v; want 0, nil", n, err)
		}
		if n, err := v6.DeleteFlows(ctx, []Flow{flow6}); err != nil || n != 1 {
			t.Errorf("IPv6 DeleteFlows(v6 flow) = %d, %v; want 1, nil", n, err)
		}
		if got := listSorted(t, v6, ProtocolUDP); len(got) != 0 {
			t.Errorf("IPv6 flows left: %v", got)
		}
		if diff := cmp.Diff([]Flow{flowA}, listSorted(t, v4, ProtocolUDP)); diff != "" {
			t.Errorf("IPv4 flow must survive (-want +got):\n%s", diff)
		}
		if _, err := New(99); err == nil {
			t.Error("New(99) succeeded")
		}
	})
}
