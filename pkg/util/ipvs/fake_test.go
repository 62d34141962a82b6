package ipvs

// Test addresses: 10.0.0.0/24 virtual servers, 10.1.0.0/24 real servers,
// fd00::/64 virtual and fd01::/64 real servers for IPv6.

import (
	"context"
	"errors"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func vsOf(proto, ip string, port uint16) *VirtualServer {
	return &VirtualServer{Address: net.ParseIP(ip), Protocol: proto, Port: port, Scheduler: "rr"}
}

func rsOf(ip string, port uint16) *RealServer {
	return &RealServer{Address: net.ParseIP(ip), Port: port, Weight: 1}
}

func TestFakeDump(t *testing.T) {
	ctx := context.Background()
	f := NewFake()
	persistent := vsOf(TCP, "10.0.0.1", 80)
	persistent.Flags, persistent.Timeout = FlagPersistent, 10800
	mh := vsOf(UDP, "10.0.0.10", 53)
	mh.Scheduler, mh.Flags = "mh", FlagSchedSH1|FlagSchedSH2
	v6 := vsOf(SCTP, "fd00::1", 9000)
	for _, vs := range []*VirtualServer{v6, mh, persistent, vsOf(TCP, "10.0.0.9", 80), vsOf(TCP, "fd00::1", 80)} {
		if err := f.AddVirtualServer(ctx, vs); err != nil {
			t.Fatal(err)
		}
	}
	for _, rs := range []*RealServer{rsOf("10.1.0.2", 80), rsOf("10.1.0.10", 80), rsOf("10.1.0.2", 79)} {
		if err := f.AddRealServer(ctx, persistent, rs); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.AddRealServer(ctx, v6, rsOf("fd01::5", 9000)); err != nil {
		t.Fatal(err)
	}
	if err := f.SetRealServerConnections(persistent, rsOf("10.1.0.10", 80), 3, 7); err != nil {
		t.Fatal(err)
	}
	want := strings.Join([]string{
		"SCTP [fd00::1]:9000 rr",
		"  -> [fd01::5]:9000 Masq 1 0 0",
		"TCP  10.0.0.1:80 rr persistent 10800",
		"  -> 10.1.0.2:79 Masq 1 0 0",
		"  -> 10.1.0.2:80 Masq 1 0 0",
		"  -> 10.1.0.10:80 Masq 1 3 7",
		"TCP  10.0.0.9:80 rr",
		"TCP  [fd00::1]:80 rr",
		"UDP  10.0.0.10:53 mh mh-fallback mh-port",
		"",
	}, "\n")
	if diff := cmp.Diff(want, f.Dump()); diff != "" {
		t.Errorf("Dump (-want +got):\n%s", diff)
	}
}

func TestFakeKernelSemantics(t *testing.T) {
	ctx := context.Background()
	vs := vsOf(TCP, "10.0.0.1", 80)
	rs := rsOf("10.1.0.1", 8080)
	type step struct {
		name string
		do   func(f *Fake) error
		// want is "" for success, or "exists", "notfound", "einval", "other".
		want string
	}
	add := func(f *Fake) error { return f.AddVirtualServer(ctx, vs) }
	addRS := func(f *Fake) error { return f.AddRealServer(ctx, vs, rs) }
	tests := []struct {
		name  string
		steps []step
		dump  string
	}{{
		name:  "duplicate virtual server",
		steps: []step{{"add", add, ""}, {"add again", add, "exists"}},
		dump:  "TCP  10.0.0.1:80 rr\n",
	}, {
		name: "missing virtual server",
		steps: []step{
			{"update", func(f *Fake) error { return f.UpdateVirtualServer(ctx, vs) }, "notfound"},
			{"delete", func(f *Fake) error { return f.DeleteVirtualServer(ctx, vs) }, "notfound"},
			{"get", func(f *Fake) error { _, err := f.GetVirtualServer(ctx, vs); return err }, "notfound"},
			{"add rs", addRS, "notfound"},
			{"update rs", func(f *Fake) error { return f.UpdateRealServer(ctx, vs, rs) }, "notfound"},
			{"delete rs", func(f *Fake) error { return f.DeleteRealServer(ctx, vs, rs) }, "notfound"},
		},
	}, {
		name: "real servers",
		steps: []step{
			{"add", add, ""},
			{"add rs", addRS, ""},
			{"add rs again", addRS, "exists"},
			{"update missing rs", func(f *Fake) error { return f.UpdateRealServer(ctx, vs, rsOf("10.1.0.2", 8080)) }, "notfound"},
			{"delete missing rs", func(f *Fake) error { return f.DeleteRealServer(ctx, vs, rsOf("10.1.0.1", 8081)) }, "notfound"},
			{"v6 rs on a v4 vs", func(f *Fake) error { return f.AddRealServer(ctx, vs, rsOf("fd01::1", 80)) }, "einval"},
			{"weight 0", func(f *Fake) error {
				return f.UpdateRealServer(ctx, vs, &RealServer{Address: rs.Address, Port: rs.Port, Weight: 0})
			}, ""},
		},
		dump: "TCP  10.0.0.1:80 rr\n  -> 10.1.0.1:8080 Masq 0 0 0\n",
	}, {
		name: "update keeps real servers, delete removes them",
		steps: []step{
			{"add", add, ""},
			{"add rs", addRS, ""},
			{"update", func(f *Fake) error {
				u := *vs
				u.Scheduler, u.Flags, u.Timeout = "wrr", FlagPersistent, 60
				return f.UpdateVirtualServer(ctx, &u)
			}, ""},
		},
		dump: "TCP  10.0.0.1:80 wrr persistent 60\n  -> 10.1.0.1:8080 Masq 1 0 0\n",
	}, {
		name: "unknown scheduler and bad input",
		steps: []step{
			{"bad scheduler", func(f *Fake) error {
				u := *vs
				u.Scheduler = "nosuch"
				return f.AddVirtualServer(ctx, &u)
			}, "notfound"},
			{"bad protocol", func(f *Fake) error { return f.AddVirtualServer(ctx, vsOf("ICMP", "10.0.0.1", 0)) }, "other"},
		},
	}, {
		name: "delete and flush",
		steps: []step{
			{"add", add, ""},
			{"add other", func(f *Fake) error { return f.AddVirtualServer(ctx, vsOf(UDP, "10.0.0.1", 80)) }, ""},
			{"delete", func(f *Fake) error { return f.DeleteVirtualServer(ctx, vs) }, ""},
			{"get deleted", func(f *Fake) error { _, err := f.GetVirtualServer(ctx, vs); return err }, "notfound"},
		},
		dump: "UDP  10.0.0.1:80 rr\n",
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := NewFake()
			for _, s := range tc.steps {
				err := s.do(f)
				var got string
				switch {
				case err == nil:
				case IsExists(err):
					got = "exists"
				case IsNotFound(err):
					got = "notfound"
				case errors.Is(err, syscall.EINVAL):
					got = "einval"
				default:
					got = "other"
				}
				if got != s.want {
					t.Errorf("%s: got %q (%v), want %q", s.name, got, err, s.want)
				}
			}
			if diff := cmp.Diff(tc.dump, f.Dump()); diff != "" {
				t.Errorf("Dump (-want +got):\n%s", diff)
			}
		})
	}
}

func TestFakeReadsAreCopiesWithHashedFlag(t *testing.T) {
	ctx := context.Background()
	f := NewFake()
	vs := vsOf(TCP, "10.0.0.1", 80)
	vs.Flags = FlagPersistent
	if err := f.AddVirtualServer(ctx, vs); err != nil {
		t.Fatal(err)
	}
	if vs.Flags != FlagPersistent {
		t.Errorf("caller's virtual server changed: flags %#x", vs.Flags)
	}
	got, err := f.GetVirtualServer(ctx, vsOf(TCP, "10.0.0.1", 80))
	if err != nil {
		t.Fatal(err)
	}
	if got.Flags != FlagPersistent|FlagHashed || !got.Equal(vs) {
		t.Errorf("stored %+v, want flags persistent|hashed", got)
	}
	got.Address[3] = 99
	list, _ := f.GetVirtualServers(ctx)
	if len(list) != 1 || list[0].Address.String() != "10.0.0.1" {
		t.Errorf("mutating a returned value changed the fake: %v", list)
	}
	if err := f.AddRealServer(ctx, vs, rsOf("10.1.0.1", 80)); err != nil {
		t.Fatal(err)
	}
	if err := f.SetRealServerConnections(vs, rsOf("10.1.0.1", 80), 2, 5); err != nil {
		t.Fatal(err)
	}
	// Updating the weight keeps the kernel's counters.
	if err := f.UpdateRealServer(ctx, vs, &RealServer{Address: net.ParseIP("10.1.0.1"), Port: 80, Weight: 0}); err != nil {
		t.Fatal(err)
	}
	rss, err := f.GetRealServers(ctx, vs)
	if err != nil {
		t.Fatal(err)
	}
	want := []*RealServer{{Address: net.IP{10, 1, 0, 1}, Port: 80, Weight: 0, ActiveConn: 2, InactiveConn: 5}}
	if diff := cmp.Diff(want, rss); diff != "" {
		t.Errorf("GetRealServers (-want +got):\n%s", diff)
	}
	// As the kernel, listing the real servers of a missing virtual server is empty.
	rss, err = f.GetRealServers(ctx, vsOf(UDP, "10.0.0.1", 80))
	if err != nil || len(rss) != 0 {
		t.Errorf("GetRealServers of a missing service = %v, %v; want empty, nil", rss, err)
	}
	if err := f.SetRealServerConnections(vs, rsOf("10.1.0.9", 80), 1, 1); !IsNotFound(err) {
		t.Errorf("SetRealServerConnections on a missing real server: %v", err)
	}
}

func TestFakeOpsAndInjection(t *testing.T) {
	ctx := context.Background()
	f := NewFake()
	vs := vsOf(TCP, "10.0.0.1", 80)
	_ = f.AddVirtualServer(ctx, vs)
	_ = f.AddVirtualServer(ctx, vs) // fails, still a round trip
	_ = f.AddRealServer(ctx, vs, rsOf("10.1.0.1", 80))
	_ = f.DeleteRealServer(ctx, vs, rsOf("10.1.0.1", 80))
	_, _ = f.GetVirtualServers(ctx)
	if diff := cmp.Diff(map[string]int{OpAddVS: 2, OpAddRS: 1, OpDelRS: 1, OpListVS: 1}, f.Ops()); diff != "" {
		t.Errorf("Ops (-want +got):\n%s", diff)
	}
	f.ResetOps()
	if len(f.Ops()) != 0 {
		t.Errorf("ResetOps left %v", f.Ops())
	}

	boom := errors.New("netlink: boom")
	f.InjectError(OpAddRS, boom)
	err := f.AddRealServer(ctx, vs, rsOf("10.1.0.2", 80))
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), "adding real server 10.1.0.2:80 to TCP/10.0.0.1:80") {
		t.Errorf("injected error = %v", err)
	}
	f.InjectError(OpDelVS, syscall.ESRCH)
	if err := f.DeleteVirtualServer(ctx, vs); !IsNotFound(err) {
		t.Errorf("injected ESRCH = %v, want IsNotFound", err)
	}
	if diff := cmp.Diff("TCP  10.0.0.1:80 rr\n", f.Dump()); diff != "" {
		t.Errorf("injected failures changed state (-want +got):\n%s", diff)
	}
	f.InjectError(OpAddRS, nil)
	if err := f.AddRealServer(ctx, vs, rsOf("10.1.0.2", 80)); err != nil {
		t.Errorf("after clearing the injection: %v", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := f.Flush(cctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Flush on a cancelled context = %v", err)
	}
}

func TestFakeTimeouts(t *testing.T) {
	ctx := context.Background()
	f := NewFake()
	if err := f.ConfigureTimeouts(ctx, 0, 30*time.Second, 0); err != nil {
		t.Fatal(err)
	}
	tcp, fin, udp := f.Timeouts()
	if tcp != 15*time.Minute || fin != 30*time.Second || udp != 5*time.Minute {
		t.Errorf("timeouts %v %v %v", tcp, fin, udp)
	}
	if err := f.ConfigureTimeouts(ctx, -1, 0, 0); err == nil {
		t.Error("negative timeout accepted")
	}
	if err := f.ConfigureTimeouts(ctx, 0, 0, 0); err != nil || f.Ops()[OpSetTimeouts] != 1 {
		t.Errorf("all-zero ConfigureTimeouts should be a no-op without a round trip: %v %v", err, f.Ops())
	}
}

func TestFakeVirtualServerContract(t *testing.T) { checkVirtualServerContract(t, NewFake()) }

func TestFakeRealServerContract(t *testing.T) { checkRealServerContract(t, NewFake()) }

func TestFakeGetAllContract(t *testing.T) { checkGetAllContract(t, NewFake()) }

func TestFakeWriteContract(t *testing.T) { checkWriteContract(t, NewFake()) }

func TestFakeGetAllFilter(t *testing.T) { checkGetAllFilter(t, NewFake()) }

func TestFakeTimeoutContract(t *testing.T) {
	f := NewFake()
	checkTimeoutContract(t, f, f.Timeouts)
}

func TestFakeListOrderContract(t *testing.T) {
	f := NewFake()
	checkListOrderContract(t, f, f.ListOrder)
}

// TestFakeTrashKeepsConnections: a real server deleted with connections and added
// again comes back with them, as the kernel takes it back from its trash
// (TestVMConnectionCounters shows the kernel doing it); one deleted without any comes
// back with none.
func TestFakeTrashKeepsConnections(t *testing.T) {
	ctx := context.Background()
	f := NewFake()
	vs := &VirtualServer{Address: net.ParseIP("10.0.0.41"), Protocol: TCP, Port: 80, Scheduler: "mh"}
	busy := &RealServer{Address: net.ParseIP("10.1.0.1"), Port: 8080, Weight: 1}
	idle := &RealServer{Address: net.ParseIP("10.1.0.2"), Port: 8080, Weight: 1}
	if err := f.AddVirtualServer(ctx, vs); err != nil {
		t.Fatal(err)
	}
	for _, rs := range []*RealServer{busy, idle} {
		if err := f.AddRealServer(ctx, vs, rs); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.SetRealServerConnections(vs, busy, 2, 1); err != nil {
		t.Fatal(err)
	}
	for _, rs := range []*RealServer{busy, idle} {
		if err := f.DeleteRealServer(ctx, vs, rs); err != nil {
			t.Fatal(err)
		}
		if err := f.AddRealServer(ctx, vs, &RealServer{Address: rs.Address, Port: rs.Port, Weight: 0}); err != nil {
			t.Fatal(err)
		}
	}
	got, err := f.GetRealServers(ctx, vs)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].ActiveConn != 2 || got[0].InactiveConn != 1 || got[0].Weight != 0 || got[1].ActiveConn+got[1].InactiveConn != 0 {
		t.Errorf("after delete and add at weight 0: %+v %+v, want 10.1.0.1 with 2/1 connections, 10.1.0.2 with none", got[0], got[1])
	}
}
