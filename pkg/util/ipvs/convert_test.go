package ipvs

// Test addresses: 10.0.0.0/24 virtual servers, 10.1.0.0/24 real servers,
// fd00::/64 and fd01::/64 for IPv6.

import (
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	libipvs "github.com/moby/ipvs"
)

func TestToService(t *testing.T) {
	tests := []struct {
		name string
		vs   VirtualServer
		want libipvs.Service
	}{{
		name: "tcp v4 persistent, hashed flag stripped",
		vs:   VirtualServer{Address: net.ParseIP("10.0.0.1"), Protocol: TCP, Port: 80, Scheduler: "rr", Flags: FlagPersistent | FlagHashed, Timeout: 10800},
		want: libipvs.Service{Address: net.ParseIP("10.0.0.1"), Protocol: 6, Port: 80, SchedName: "rr", Flags: FlagPersistent, Timeout: 10800, Netmask: 0xffffffff, AddressFamily: syscall.AF_INET},
	}, {
		name: "udp v6",
		vs:   VirtualServer{Address: net.ParseIP("fd00::1"), Protocol: UDP, Port: 53, Scheduler: "wrr"},
		want: libipvs.Service{Address: net.ParseIP("fd00::1"), Protocol: 17, Port: 53, SchedName: "wrr", Netmask: 128, AddressFamily: syscall.AF_INET6},
	}, {
		name: "sctp mh with source-hash flags",
		vs:   VirtualServer{Address: net.ParseIP("10.0.0.2").To4(), Protocol: SCTP, Port: 9000, Scheduler: "mh", Flags: FlagSchedSH1 | FlagSchedSH2},
		want: libipvs.Service{Address: net.ParseIP("10.0.0.2").To4(), Protocol: 132, Port: 9000, SchedName: "mh", Flags: FlagSchedSH1 | FlagSchedSH2, Netmask: 0xffffffff, AddressFamily: syscall.AF_INET},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := toService(&tc.vs)
			if err != nil {
				t.Fatalf("toService: %v", err)
			}
			if diff := cmp.Diff(&tc.want, got); diff != "" {
				t.Errorf("toService (-want +got):\n%s", diff)
			}
			back, err := toVirtualServer(got)
			if err != nil {
				t.Fatalf("toVirtualServer: %v", err)
			}
			if !back.Equal(&tc.vs) {
				t.Errorf("round trip: got %+v, want %+v", back, tc.vs)
			}
		})
	}
}

func TestToServiceErrors(t *testing.T) {
	for _, vs := range []*VirtualServer{
		nil,
		{Address: net.ParseIP("10.0.0.1"), Protocol: "ICMP", Port: 1, Scheduler: "rr"},
		{Address: nil, Protocol: TCP, Port: 1, Scheduler: "rr"},
		{Address: net.IP{1, 2, 3}, Protocol: TCP, Port: 1, Scheduler: "rr"},
	} {
		if svc, err := toService(vs); err == nil {
			t.Errorf("toService(%+v) = %+v, want an error", vs, svc)
		}
	}
}

func TestToVirtualServerKeepsHashedFlagAndNormalizes(t *testing.T) {
	// The kernel returns IPv4 addresses in 16-byte form from net.IP parsing paths.
	svc := &libipvs.Service{Address: net.ParseIP("10.0.0.1"), Protocol: 6, Port: 443, SchedName: "rr", Flags: FlagHashed | FlagPersistent, Timeout: 30}
	vs, err := toVirtualServer(svc)
	if err != nil {
		t.Fatal(err)
	}
	if len(vs.Address) != net.IPv4len {
		t.Errorf("address length %d, want 4", len(vs.Address))
	}
	if vs.Flags != FlagHashed|FlagPersistent {
		t.Errorf("flags %#x, want %#x", vs.Flags, FlagHashed|FlagPersistent)
	}
	if vs.Key() != "TCP/10.0.0.1:443" {
		t.Errorf("key %q", vs.Key())
	}
	if _, err := toVirtualServer(&libipvs.Service{Address: net.ParseIP("10.0.0.1"), Protocol: 1}); err == nil {
		t.Error("protocol 1 accepted")
	}
}

func TestToDestination(t *testing.T) {
	d, err := toDestination(&RealServer{Address: net.ParseIP("10.1.0.5"), Port: 8080, Weight: 1, ActiveConn: 9})
	if err != nil {
		t.Fatal(err)
	}
	want := &libipvs.Destination{Address: net.ParseIP("10.1.0.5"), Port: 8080, Weight: 1, ConnectionFlags: libipvs.ConnectionFlagMasq, AddressFamily: syscall.AF_INET}
	if diff := cmp.Diff(want, d); diff != "" {
		t.Errorf("toDestination (-want +got):\n%s", diff)
	}
	d6, err := toDestination(&RealServer{Address: net.ParseIP("fd01::5"), Port: 80, Weight: 0})
	if err != nil {
		t.Fatal(err)
	}
	if d6.AddressFamily != syscall.AF_INET6 || d6.Weight != 0 {
		t.Errorf("v6 destination %+v", d6)
	}
	if _, err := toDestination(&RealServer{Address: net.ParseIP("10.1.0.5"), Port: 1, Weight: -1}); err == nil {
		t.Error("negative weight accepted")
	}
	rs := toRealServer(&libipvs.Destination{Address: net.ParseIP("10.1.0.5"), Port: 8080, Weight: 3, ActiveConnections: 4, InactiveConnections: 7})
	if diff := cmp.Diff(&RealServer{Address: net.IP{10, 1, 0, 5}, Port: 8080, Weight: 3, ActiveConn: 4, InactiveConn: 7}, rs); diff != "" {
		t.Errorf("toRealServer (-want +got):\n%s", diff)
	}
}

func TestKeepOrSet(t *testing.T) {
	for _, tc := range []struct{ cur, want, got string }{
		{"900s", "0s", "900s"},
		{"900s", "30s", "30s"},
		{"900s", "1500ms", "2s"},
		{"900s", "1ms", "1s"},
	} {
		cur, _ := parseDur(tc.cur)
		want, _ := parseDur(tc.want)
		exp, _ := parseDur(tc.got)
		if got := keepOrSet(cur, want); got != exp {
			t.Errorf("keepOrSet(%s, %s) = %v, want %v", tc.cur, tc.want, got, exp)
		}
	}
}

func FuzzServiceRoundTrip(f *testing.F) {
	f.Add([]byte{10, 0, 0, 1}, uint8(0), uint16(80), uint32(FlagPersistent), uint32(10800), "rr")
	f.Add([]byte(net.ParseIP("fd00::1").To16()), uint8(1), uint16(53), uint32(0), uint32(0), "mh")
	f.Fuzz(func(t *testing.T, ip []byte, proto uint8, port uint16, flags, timeout uint32, sched string) {
		vs := &VirtualServer{Address: net.IP(ip), Protocol: []string{TCP, UDP, SCTP, "X"}[proto%4], Port: port, Scheduler: sched, Flags: flags, Timeout: timeout}
		svc, err := toService(vs)
		if err != nil {
			if (len(ip) == 4 || len(ip) == 16) && vs.Protocol != "X" {
				t.Fatalf("toService(%+v): %v", vs, err)
			}
			return
		}
		if svc.Flags&FlagHashed != 0 {
			t.Fatalf("hashed flag sent to the kernel: %#x", svc.Flags)
		}
		back, err := toVirtualServer(svc)
		if err != nil {
			t.Fatalf("toVirtualServer(%+v): %v", svc, err)
		}
		if !back.Equal(vs) || back.Key() != vs.Key() {
			t.Fatalf("round trip %+v -> %+v", vs, back)
		}
	})
}

func parseDur(s string) (d time.Duration, err error) { return time.ParseDuration(s) }
