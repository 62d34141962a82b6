package ipvs

// Test addresses: 10.0.0.0/24 and fd00::/64 virtual servers, 10.1.0.0/24 and
// fd01::/64 real servers.

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/ipfamily"
)

// errKind classifies an error the way the proxier does.
func errKind(err error) string {
	switch {
	case err == nil:
		return "ok"
	case IsExists(err):
		return "exists"
	case IsNotFound(err):
		return "notfound"
	case IsInvalid(err):
		return "einval"
	}
	return "other: " + err.Error()
}

func expectKind(t *testing.T, what string, err error, want string) {
	t.Helper()
	if got := errKind(err); got != want {
		t.Errorf("%s: got %s, want %s", what, got, want)
	}
}

// checkVirtualServerContract runs one scenario over every protocol and family
// against an empty Interface: the Fake on the host, the kernel in the VM, so the
// Fake's answers are checked against the kernel's.
func checkVirtualServerContract(t *testing.T, h Interface) {
	t.Helper()
	ctx := context.Background()
	var all []string
	for _, proto := range []string{TCP, UDP, SCTP} {
		for _, addr := range []string{"10.0.0.1", "fd00::1"} {
			vs := &VirtualServer{Address: net.ParseIP(addr), Protocol: proto, Port: 80, Scheduler: "rr"}
			name := vs.Key()
			all = append(all, name)
			expectKind(t, "add "+name, h.AddVirtualServer(ctx, vs), "ok")
			expectKind(t, "add again "+name, h.AddVirtualServer(ctx, vs), "exists")
			got, err := h.GetVirtualServer(ctx, vs)
			if err != nil {
				t.Fatalf("get %s: %v", name, err)
			}
			if !got.Equal(vs) || got.Flags&FlagHashed == 0 {
				t.Errorf("get %s = %+v, want %+v with the hashed flag", name, got, vs)
			}
			upd := *vs
			upd.Scheduler, upd.Flags, upd.Timeout = "wrr", FlagPersistent, 10800
			expectKind(t, "update "+name, h.UpdateVirtualServer(ctx, &upd), "ok")
			if got, err = h.GetVirtualServer(ctx, vs); err != nil || !got.Equal(&upd) {
				t.Errorf("get after update %s = %+v, %v; want %+v", name, got, err, upd)
			}
		}
	}
	list, err := h.GetVirtualServers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, vs := range list {
		keys = append(keys, vs.Key())
		if vs.Scheduler != "wrr" || vs.Flags != FlagPersistent|FlagHashed || vs.Timeout != 10800 {
			t.Errorf("listed %+v, want wrr persistent 10800", vs)
		}
	}
	if diff := cmp.Diff(sortedStrings(all), sortedStrings(keys)); diff != "" {
		t.Errorf("GetVirtualServers (-want +got):\n%s", diff)
	}

	vs := &VirtualServer{Address: net.ParseIP("10.0.0.1"), Protocol: TCP, Port: 80, Scheduler: "rr"}
	expectKind(t, "delete", h.DeleteVirtualServer(ctx, vs), "ok")
	expectKind(t, "delete again", h.DeleteVirtualServer(ctx, vs), "notfound")
	_, err = h.GetVirtualServer(ctx, vs)
	expectKind(t, "get deleted", err, "notfound")
	expectKind(t, "update deleted", h.UpdateVirtualServer(ctx, vs), "notfound")
	other := &VirtualServer{Address: net.ParseIP("10.0.0.1"), Protocol: TCP, Port: 81, Scheduler: "nosuchsched"}
	expectKind(t, "unknown scheduler", h.AddVirtualServer(ctx, other), "notfound")

	// mh with both source-hash flags (what kube-proxy sets for scheduler mh).
	mh := &VirtualServer{Address: net.ParseIP("10.0.0.2"), Protocol: UDP, Port: 53, Scheduler: "mh", Flags: FlagSchedSH1 | FlagSchedSH2}
	expectKind(t, "add mh", h.AddVirtualServer(ctx, mh), "ok")
	if got, err := h.GetVirtualServer(ctx, mh); err != nil || !got.Equal(mh) {
		t.Errorf("get mh = %+v, %v; want %+v", got, err, mh)
	}

	expectKind(t, "flush", h.Flush(ctx), "ok")
	if list, err := h.GetVirtualServers(ctx); err != nil || len(list) != 0 {
		t.Errorf("after flush: %v, %v", list, err)
	}
}

// checkRealServerContract: real server semantics against an empty Interface.
func checkRealServerContract(t *testing.T, h Interface) {
	t.Helper()
	ctx := context.Background()
	for _, fam := range []struct{ vip, rip, otherFamily string }{
		{"10.0.0.1", "10.1.0.", "fd01::1"},
		{"fd00::1", "fd01::", "10.1.0.1"},
	} {
		vs := &VirtualServer{Address: net.ParseIP(fam.vip), Protocol: TCP, Port: 80, Scheduler: "rr"}
		rs1 := &RealServer{Address: net.ParseIP(fam.rip + "1"), Port: 8080, Weight: 1}
		rs2 := &RealServer{Address: net.ParseIP(fam.rip + "2"), Port: 8080, Weight: 1}
		expectKind(t, "add rs to missing vs", h.AddRealServer(ctx, vs, rs1), "notfound")
		expectKind(t, "update rs of missing vs", h.UpdateRealServer(ctx, vs, rs1), "notfound")
		expectKind(t, "delete rs of missing vs", h.DeleteRealServer(ctx, vs, rs1), "notfound")
		rss, err := h.GetRealServers(ctx, vs)
		if err != nil || len(rss) != 0 {
			t.Errorf("real servers of a missing vs = %v, %v; want empty, nil", rss, err)
		}

		expectKind(t, "add vs", h.AddVirtualServer(ctx, vs), "ok")
		expectKind(t, "add rs1", h.AddRealServer(ctx, vs, rs1), "ok")
		expectKind(t, "add rs2", h.AddRealServer(ctx, vs, rs2), "ok")
		expectKind(t, "add rs1 again", h.AddRealServer(ctx, vs, rs1), "exists")
		expectKind(t, "rs of the other family", h.AddRealServer(ctx, vs, &RealServer{Address: net.ParseIP(fam.otherFamily), Port: 80, Weight: 1}), "einval")
		expectKind(t, "update missing rs", h.UpdateRealServer(ctx, vs, &RealServer{Address: rs1.Address, Port: 9999, Weight: 1}), "notfound")
		expectKind(t, "weight 0", h.UpdateRealServer(ctx, vs, &RealServer{Address: rs2.Address, Port: 8080, Weight: 0}), "ok")
		rss, err = h.GetRealServers(ctx, vs)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for _, rs := range rss {
			got[rs.Key()] = fmt.Sprintf("w=%d a=%d i=%d", rs.Weight, rs.ActiveConn, rs.InactiveConn)
		}
		want := map[string]string{rs1.Key(): "w=1 a=0 i=0", rs2.Key(): "w=0 a=0 i=0"}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("real servers of %s (-want +got):\n%s", vs, diff)
		}
		expectKind(t, "delete rs1", h.DeleteRealServer(ctx, vs, rs1), "ok")
		expectKind(t, "delete rs1 again", h.DeleteRealServer(ctx, vs, rs1), "notfound")
		if rss, err = h.GetRealServers(ctx, vs); err != nil || len(rss) != 1 || rss[0].Key() != rs2.Key() {
			t.Errorf("after delete: %v, %v", rss, err)
		}
		// Deleting the virtual server takes its real servers with it.
		expectKind(t, "delete vs", h.DeleteVirtualServer(ctx, vs), "ok")
		expectKind(t, "re-add vs", h.AddVirtualServer(ctx, vs), "ok")
		if rss, err = h.GetRealServers(ctx, vs); err != nil || len(rss) != 0 {
			t.Errorf("re-added vs has real servers %v, %v", rss, err)
		}
		expectKind(t, "cleanup", h.DeleteVirtualServer(ctx, vs), "ok")
	}
}

// checkTimeoutContract: 0 keeps a timeout, others are set. read returns the
// current tcp, tcpfin, udp timeouts.
func checkTimeoutContract(t *testing.T, h Interface, read func() (time.Duration, time.Duration, time.Duration)) {
	t.Helper()
	ctx := context.Background()
	tcp0, fin0, udp0 := read()
	if err := h.ConfigureTimeouts(ctx, 0, 30*time.Second, 0); err != nil {
		t.Fatal(err)
	}
	if tcp, fin, udp := read(); tcp != tcp0 || fin != 30*time.Second || udp != udp0 {
		t.Errorf("after (0, 30s, 0): %v %v %v; want %v 30s %v", tcp, fin, udp, tcp0, udp0)
	}
	if err := h.ConfigureTimeouts(ctx, 2*time.Hour, 0, 1500*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if tcp, fin, udp := read(); tcp != 2*time.Hour || fin != 30*time.Second || udp != 2*time.Second {
		t.Errorf("after (2h, 0, 1.5s): %v %v %v; want 2h 30s 2s", tcp, fin, udp)
	}
	if err := h.ConfigureTimeouts(ctx, tcp0, fin0, udp0); err != nil {
		t.Fatal(err)
	}
}

func sortedStrings(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return out
}

// tableText prints virtual servers and real servers one per line, sorted, with
// every field GetAll must agree on (the hashed flag and the counters of the
// virtual server excluded: they are the kernel's).
func tableText(dumps []VirtualServerDump) string {
	var lines []string
	for _, d := range dumps {
		vs := d.VirtualServer
		lines = append(lines, fmt.Sprintf("%s %s flags=%#x timeout=%d", vs.Key(), vs.Scheduler, vs.Flags&^FlagHashed, vs.Timeout))
		for _, rs := range d.RealServers {
			lines = append(lines, fmt.Sprintf("%s -> %s w=%d a=%d i=%d", vs.Key(), rs.Key(), rs.Weight, rs.ActiveConn, rs.InactiveConn))
		}
	}
	return strings.Join(sortedStrings(lines), "\n")
}

// onePerServer is what GetVirtualServers plus GetRealServers for each return.
func onePerServer(t *testing.T, h Interface) []VirtualServerDump {
	t.Helper()
	ctx := context.Background()
	vss, err := h.GetVirtualServers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []VirtualServerDump
	for _, vs := range vss {
		rss, err := h.GetRealServers(ctx, vs)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, VirtualServerDump{VirtualServer: vs, RealServers: rss})
	}
	return out
}

// getAllTable is the table checkGetAllContract programs, as tableText prints it.
const getAllTable = `SCTP/10.0.0.5:9 rr flags=0x0 timeout=0
SCTP/10.0.0.5:9 -> 10.1.0.5:9 w=1 a=0 i=0
TCP/10.0.0.1:80 rr flags=0x0 timeout=0
TCP/10.0.0.1:80 -> 10.1.0.1:8080 w=1 a=0 i=0
TCP/10.0.0.1:80 -> 10.1.0.2:8080 w=0 a=0 i=0
TCP/10.0.0.1:80 -> 10.1.0.3:8080 w=7 a=0 i=0
TCP/10.0.0.2:443 wrr flags=0x1 timeout=10800
TCP/10.0.0.2:443 -> 10.1.0.1:65535 w=1 a=0 i=0
TCP/10.0.0.3:1 mh flags=0x18 timeout=0
TCP/10.0.0.3:1 -> 10.1.0.9:1 w=65535 a=0 i=0
TCP/[fd00::1]:80 sh flags=0x9 timeout=60
TCP/[fd00::1]:80 -> [fd01::1]:8080 w=1 a=0 i=0
TCP/[fd00::1]:80 -> [fd01::ff:2]:8080 w=3 a=0 i=0
UDP/10.0.0.4:53 rr flags=0x4 timeout=0
UDP/10.0.0.4:53 -> 10.1.0.4:53 w=1 a=0 i=0
UDP/[fd00::2]:53 rr flags=0x4 timeout=0`

// checkGetAllContract: GetAll answers what GetVirtualServers plus GetRealServers
// for each answer, for every protocol, family, flag and weight the proxier
// uses (and an empty virtual server).
func checkGetAllContract(t *testing.T, h Interface) {
	t.Helper()
	ctx := context.Background()
	if all, err := h.GetAll(ctx, ipfamily.Any, nil); err != nil || len(all) != 0 {
		t.Fatalf("GetAll of an empty table = %v, %v", all, err)
	}
	type rsSpec struct {
		ip     string
		port   uint16
		weight int
	}
	for _, s := range []struct {
		vs  VirtualServer
		rss []rsSpec
	}{
		{VirtualServer{Address: net.ParseIP("10.0.0.1"), Protocol: TCP, Port: 80, Scheduler: "rr"},
			[]rsSpec{{"10.1.0.1", 8080, 1}, {"10.1.0.2", 8080, 0}, {"10.1.0.3", 8080, 7}}},
		{VirtualServer{Address: net.ParseIP("10.0.0.2"), Protocol: TCP, Port: 443, Scheduler: "wrr", Flags: FlagPersistent, Timeout: 10800},
			[]rsSpec{{"10.1.0.1", 65535, 1}}},
		{VirtualServer{Address: net.ParseIP("10.0.0.3"), Protocol: TCP, Port: 1, Scheduler: "mh", Flags: FlagSchedSH1 | FlagSchedSH2},
			[]rsSpec{{"10.1.0.9", 1, 65535}}},
		{VirtualServer{Address: net.ParseIP("fd00::1"), Protocol: TCP, Port: 80, Scheduler: "sh", Flags: FlagPersistent | FlagSchedSH1, Timeout: 60},
			[]rsSpec{{"fd01::1", 8080, 1}, {"fd01::ff:2", 8080, 3}}},
		{VirtualServer{Address: net.ParseIP("10.0.0.4"), Protocol: UDP, Port: 53, Scheduler: "rr", Flags: FlagOnePacket},
			[]rsSpec{{"10.1.0.4", 53, 1}}},
		{VirtualServer{Address: net.ParseIP("fd00::2"), Protocol: UDP, Port: 53, Scheduler: "rr", Flags: FlagOnePacket}, nil},
		{VirtualServer{Address: net.ParseIP("10.0.0.5"), Protocol: SCTP, Port: 9, Scheduler: "rr"},
			[]rsSpec{{"10.1.0.5", 9, 1}}},
	} {
		vs := s.vs
		if err := h.AddVirtualServer(ctx, &vs); err != nil {
			t.Fatal(err)
		}
		for _, r := range s.rss {
			if err := h.AddRealServer(ctx, &vs, &RealServer{Address: net.ParseIP(r.ip), Port: r.port, Weight: r.weight}); err != nil {
				t.Fatal(err)
			}
		}
	}
	all, err := h.GetAll(ctx, ipfamily.Any, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Join(sortedStrings(strings.Split(getAllTable, "\n")), "\n")
	if diff := cmp.Diff(want, tableText(all)); diff != "" {
		t.Errorf("GetAll (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(tableText(onePerServer(t, h)), tableText(all)); diff != "" {
		t.Errorf("GetAll against one read per virtual server (-one by one +GetAll):\n%s", diff)
	}
	for _, d := range all {
		if d.VirtualServer.Flags&FlagHashed == 0 {
			t.Errorf("GetAll: %s without the hashed flag", d.VirtualServer)
		}
		if d.RealServers == nil {
			t.Errorf("GetAll: %s has a nil real server list, want empty", d.VirtualServer)
		}
	}
	// Reads are copies: changing them changes nothing.
	all[0].VirtualServer.Scheduler = "xx"
	all[0].RealServers = append(all[0].RealServers, &RealServer{})
	if again, err := h.GetAll(ctx, ipfamily.Any, nil); err != nil || tableText(again) != want {
		t.Errorf("GetAll after changing a previous answer = %v\n%s", err, tableText(again))
	}
	expectKind(t, "flush", h.Flush(ctx), "ok")
}

// checkWriteContract: a pipelined batch gives each write the answer the single
// call gives, in order, across more than one chunk.
func checkWriteContract(t *testing.T, h Interface) {
	t.Helper()
	ctx := context.Background()
	vs := func(ip string) *VirtualServer {
		return &VirtualServer{Address: net.ParseIP(ip), Protocol: TCP, Port: 80, Scheduler: "rr"}
	}
	rs := func(ip string, w int) *RealServer {
		return &RealServer{Address: net.ParseIP(ip), Port: 8080, Weight: w}
	}
	a, b, v6 := vs("10.0.0.1"), vs("10.0.0.2"), vs("fd00::1")
	persistent := *a
	persistent.Flags, persistent.Timeout, persistent.Scheduler = FlagPersistent, 10800, "wrr"
	writes := []Write{
		{Kind: WriteAddVirtualServer, VS: a},
		{Kind: WriteAddVirtualServer, VS: a},
		{Kind: WriteAddRealServer, VS: a, RS: rs("10.1.0.1", 1)},
		{Kind: WriteAddRealServer, VS: a, RS: rs("10.1.0.2", 1)},
		{Kind: WriteAddRealServer, VS: a, RS: rs("10.1.0.1", 1)},
		{Kind: WriteAddRealServer, VS: b, RS: rs("10.1.0.1", 1)},
		{Kind: WriteUpdateRealServer, VS: a, RS: rs("10.1.0.2", 0)},
		{Kind: WriteAddRealServer, VS: a, RS: rs("fd01::1", 1)},
		{Kind: WriteDeleteRealServer, VS: a, RS: rs("10.1.0.9", 1)},
		{Kind: WriteUpdateVirtualServer, VS: &persistent},
		{Kind: WriteDeleteVirtualServer, VS: b},
		{Kind: WriteAddVirtualServer, VS: v6},
		{Kind: WriteAddRealServer, VS: v6, RS: rs("fd01::1", 3)},
		{Kind: WriteAddVirtualServer, VS: &VirtualServer{Address: net.ParseIP("10.0.0.3"), Protocol: UDP, Port: 53, Scheduler: "nope"}},
	}
	want := []string{"ok", "exists", "ok", "ok", "exists", "notfound", "ok", "einval", "notfound", "ok", "notfound", "ok", "ok", "notfound"}
	// Past one chunk: 300 more virtual servers with a real server each.
	for i := 0; i < 300; i++ {
		v := &VirtualServer{Address: net.IPv4(10, 0, 1+byte(i/250), byte(i%250)), Protocol: TCP, Port: 443, Scheduler: "rr"}
		writes = append(writes, Write{Kind: WriteAddVirtualServer, VS: v},
			Write{Kind: WriteAddRealServer, VS: v, RS: &RealServer{Address: net.IPv4(10, 1, 1, byte(i%250)), Port: uint16(1000 + i), Weight: 1}})
		want = append(want, "ok", "ok")
	}
	errs := h.Write(ctx, writes)
	if len(errs) != len(writes) {
		t.Fatalf("Write returned %d errors for %d writes", len(errs), len(writes))
	}
	for i, err := range errs {
		if got := errKind(err); got != want[i] {
			t.Errorf("write %d (%s): %s (%v), want %s", i, writes[i], got, err, want[i])
		}
	}
	all, err := h.GetAll(ctx, ipfamily.Any, nil)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(tableText(all), "\n")
	var head []string
	for _, l := range lines {
		if !strings.Contains(l, ":443") {
			head = append(head, l)
		}
	}
	wantHead := []string{
		"TCP/10.0.0.1:80 -> 10.1.0.1:8080 w=1 a=0 i=0",
		"TCP/10.0.0.1:80 -> 10.1.0.2:8080 w=0 a=0 i=0",
		"TCP/10.0.0.1:80 wrr flags=0x1 timeout=10800",
		"TCP/[fd00::1]:80 -> [fd01::1]:8080 w=1 a=0 i=0",
		"TCP/[fd00::1]:80 rr flags=0x0 timeout=0",
	}
	// The last real server of v6 was added with weight 3.
	wantHead[3] = "TCP/[fd00::1]:80 -> [fd01::1]:8080 w=3 a=0 i=0"
	if diff := cmp.Diff(wantHead, head); diff != "" {
		t.Errorf("table after the batch (-want +got):\n%s", diff)
	}
	if n := len(lines) - len(head); n != 600 {
		t.Errorf("%d lines of the 300 extra virtual servers, want 600", n)
	}
	if errs := h.Write(ctx, nil); len(errs) != 0 {
		t.Errorf("empty batch: %v", errs)
	}
	expectKind(t, "flush", h.Flush(ctx), "ok")
}

// checkGetAllFilter: GetAll returns only what keep accepts.
func checkGetAllFilter(t *testing.T, h Interface) {
	t.Helper()
	ctx := context.Background()
	for _, ip := range []string{"10.0.0.1", "fd00::1"} {
		vs := &VirtualServer{Address: net.ParseIP(ip), Protocol: TCP, Port: 80, Scheduler: "rr"}
		if err := h.AddVirtualServer(ctx, vs); err != nil {
			t.Fatal(err)
		}
		rs := &RealServer{Address: net.ParseIP(strings.Replace(strings.Replace(ip, "10.0.", "10.1.", 1), "fd00", "fd01", 1)), Port: 8080, Weight: 1}
		if err := h.AddRealServer(ctx, vs, rs); err != nil {
			t.Fatal(err)
		}
	}
	v6, err := h.GetAll(ctx, ipfamily.Any, func(vs *VirtualServer) bool { return vs.Address.To4() == nil })
	if err != nil || tableText(v6) != "TCP/[fd00::1]:80 -> [fd01::1]:8080 w=1 a=0 i=0\nTCP/[fd00::1]:80 rr flags=0x0 timeout=0" {
		t.Errorf("GetAll of IPv6 only = %v\n%s", err, tableText(v6))
	}
	// The family argument alone, and with keep.
	for _, c := range []struct {
		af   ipfamily.Family
		keep func(*VirtualServer) bool
		want string
	}{
		{ipfamily.IPv6, nil, "TCP/[fd00::1]:80 -> [fd01::1]:8080 w=1 a=0 i=0\nTCP/[fd00::1]:80 rr flags=0x0 timeout=0"},
		{ipfamily.IPv4, nil, "TCP/10.0.0.1:80 -> 10.1.0.1:8080 w=1 a=0 i=0\nTCP/10.0.0.1:80 rr flags=0x0 timeout=0"},
		{ipfamily.IPv4, func(vs *VirtualServer) bool { return vs.Address.To4() == nil }, ""},
	} {
		got, err := h.GetAll(ctx, c.af, c.keep)
		if err != nil || tableText(got) != c.want {
			t.Errorf("GetAll of family %d = %v\n%s\nwant\n%s", c.af, err, tableText(got), c.want)
		}
	}
	if none, err := h.GetAll(ctx, ipfamily.Any, func(*VirtualServer) bool { return false }); err != nil || len(none) != 0 {
		t.Errorf("GetAll keeping nothing = %v, %v", none, err)
	}
	expectKind(t, "flush", h.Flush(ctx), "ok")
}

// checkListOrderContract: the kernel adds a real server at the head of its virtual
// server's list (the sh and mh schedulers walk that list), deleting one takes it out,
// and adding it again puts it at the head. order lists the real servers in the
// kernel's order: the destination dump for the kernel, ListOrder for the Fake.
func checkListOrderContract(t *testing.T, h Interface, order func(*VirtualServer) []*RealServer) {
	ctx := context.Background()
	vs := &VirtualServer{Address: net.ParseIP("10.0.0.40"), Protocol: TCP, Port: 80, Scheduler: "mh"}
	if err := h.AddVirtualServer(ctx, vs); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = h.DeleteVirtualServer(ctx, vs) }()
	rs := func(last byte) *RealServer {
		return &RealServer{Address: net.IPv4(10, 1, 0, last), Port: 8080, Weight: 1}
	}
	words := func() string {
		var w []string
		for _, r := range order(vs) {
			w = append(w, r.Address.String())
		}
		return strings.Join(w, " ")
	}
	for _, last := range []byte{2, 1, 3} {
		if err := h.AddRealServer(ctx, vs, rs(last)); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := words(), "10.1.0.3 10.1.0.1 10.1.0.2"; got != want {
		t.Errorf("after adding .2, .1, .3: list %q, want %q (the newest first)", got, want)
	}
	errs := h.Write(ctx, []Write{{Kind: WriteDeleteRealServer, VS: vs, RS: rs(2)}, {Kind: WriteAddRealServer, VS: vs, RS: rs(2)}})
	if errs[0] != nil || errs[1] != nil {
		t.Fatalf("delete and add again: %v", errs)
	}
	if got, want := words(), "10.1.0.2 10.1.0.3 10.1.0.1"; got != want {
		t.Errorf("after deleting .2 and adding it again: list %q, want %q", got, want)
	}
}
