//go:build vmtest

package ipvs

// Real-kernel IPVS tests: the development host has no IPVS, so these are built
// with -tags vmtest and run as root inside the test VM (hack/vmtest.sh). Each runs
// in a fresh network namespace (IPVS tables are per namespace).
//
// Test addresses: 10.0.0.0/24 and fd00::/64 virtual servers, 10.1.0.0/24 and
// fd01::/64 real servers, 10.96.0.1 / 10.244.0.9 for the traffic test.

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/testing/netns"
	libipvs "github.com/moby/ipvs"
	vnl "github.com/vishvananda/netlink"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/ipfamily"
)

func newVMClient(t *testing.T) *Client {
	t.Helper()
	c, err := New("")
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

func TestVMVirtualServerContract(t *testing.T) {
	netns.Run(t, func(t *testing.T) { checkVirtualServerContract(t, newVMClient(t)) })
}

func TestVMListOrderContract(t *testing.T) {
	netns.Run(t, func(t *testing.T) {
		c := newVMClient(t)
		checkListOrderContract(t, c, func(vs *VirtualServer) []*RealServer {
			rss, err := c.GetRealServers(context.Background(), vs)
			if err != nil {
				t.Fatal(err)
			}
			return rss
		})
	})
}

func TestVMRealServerContract(t *testing.T) {
	netns.Run(t, func(t *testing.T) { checkRealServerContract(t, newVMClient(t)) })
}

// TestVMGetAllContract checks the bulk read against the kernel: the same
// answer as one destination dump per virtual server, with the real servers
// taken from the proc table (no per-server dump).
func TestVMGetAllContract(t *testing.T) {
	netns.Run(t, func(t *testing.T) {
		c := newVMClient(t)
		if c.proc == nil {
			t.Fatalf("%s could not be opened: GetAll would dump per virtual server", procIPVSPath)
		}
		checkGetAllContract(t, c)
		if c.perServiceReads != 0 {
			t.Errorf("GetAll made %d per-virtual-server destination dumps, want 0 (all from the proc table)", c.perServiceReads)
		}
	})
}

// TestVMWriteContract checks pipelined writes against the kernel: one answer
// per write, the errnos of the single calls.
func TestVMWriteContract(t *testing.T) {
	netns.Run(t, func(t *testing.T) { checkWriteContract(t, newVMClient(t)) })
}

func TestVMGetAllFilter(t *testing.T) {
	netns.Run(t, func(t *testing.T) { checkGetAllFilter(t, newVMClient(t)) })
}

func TestVMTimeoutContract(t *testing.T) {
	netns.Run(t, func(t *testing.T) {
		c := newVMClient(t)
		read := func() (time.Duration, time.Duration, time.Duration) {
			c.mu.Lock()
			defer c.mu.Unlock()
			cfg, err := getConfig(c.handle)
			if err != nil {
				t.Fatalf("GetConfig: %v", err)
			}
			return cfg.TimeoutTCP, cfg.TimeoutTCPFin, cfg.TimeoutUDP
		}
		tcp, fin, udp := read()
		t.Logf("kernel default timeouts: tcp %v tcpfin %v udp %v", tcp, fin, udp)
		if tcp != defaultTCPTimeout || fin != defaultTCPFinTimeout || udp != defaultUDPTimeout {
			t.Errorf("the Fake's defaults (%v %v %v) differ from the kernel's", defaultTCPTimeout, defaultTCPFinTimeout, defaultUDPTimeout)
		}
		checkTimeoutContract(t, c, read)
	})
}

// TestVMConnectionCounters sends real traffic through a NAT virtual server and
// reads the kernel's connection counters back through GetRealServers.
func TestVMConnectionCounters(t *testing.T) {
	netns.Run(t, func(t *testing.T) {
		// The VIP and a local "endpoint" address on a dummy link, the endpoint
		// listening: node -> VIP:80 -> IPVS NAT -> 10.244.0.9:8080 (local).
		dummy := &vnl.Dummy{LinkAttrs: vnl.LinkAttrs{Name: "kpv-dummy0"}}
		if err := vnl.LinkAdd(dummy); err != nil {
			t.Fatal(err)
		}
		if err := vnl.LinkSetUp(dummy); err != nil {
			t.Fatal(err)
		}
		for _, a := range []string{"10.96.0.1/32", "10.244.0.9/32"} {
			addr, _ := vnl.ParseAddr(a)
			if err := vnl.AddrAdd(dummy, addr); err != nil {
				t.Fatal(err)
			}
		}
		ln, err := net.Listen("tcp", "10.244.0.9:8080")
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
				defer conn.Close()
			}
		}()

		ctx := context.Background()
		c := newVMClient(t)
		vs := &VirtualServer{Address: net.ParseIP("10.96.0.1"), Protocol: TCP, Port: 80, Scheduler: "rr"}
		rs := &RealServer{Address: net.ParseIP("10.244.0.9"), Port: 8080, Weight: 1}
		if err := c.AddVirtualServer(ctx, vs); err != nil {
			t.Fatal(err)
		}
		if err := c.AddRealServer(ctx, vs, rs); err != nil {
			t.Fatal(err)
		}
		conn, err := net.DialTimeout("tcp", "10.96.0.1:80", 10*time.Second)
		if err != nil {
			t.Fatalf("connecting through IPVS: %v", err)
		}
		rss, err := c.GetRealServers(ctx, vs)
		if err != nil {
			t.Fatal(err)
		}
		if len(rss) != 1 || rss[0].ActiveConn != 1 {
			t.Fatalf("with one open connection: %+v, want ActiveConn 1", rss)
		}
		if all, err := c.GetAll(ctx, ipfamily.Any, nil); err != nil || len(all) != 1 || len(all[0].RealServers) != 1 || all[0].RealServers[0].ActiveConn != 1 {
			t.Errorf("GetAll with one open connection = %v, %v; want one real server with ActiveConn 1", all, err)
		}
		conn.Close()
		// After the close the entry leaves ESTABLISHED: no longer active, inactive
		// until it expires (TIME_WAIT/CLOSE in IPVS terms).
		deadline := time.Now().Add(10 * time.Second)
		for {
			rss, err = c.GetRealServers(ctx, vs)
			if err != nil {
				t.Fatal(err)
			}
			if rss[0].ActiveConn == 0 && rss[0].InactiveConn == 1 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("after close: %+v, want ActiveConn 0 InactiveConn 1", rss[0])
			}
			time.Sleep(100 * time.Millisecond)
		}
		// A weight-0 update keeps the counters (graceful termination relies on it).
		if err := c.UpdateRealServer(ctx, vs, &RealServer{Address: rs.Address, Port: rs.Port, Weight: 0}); err != nil {
			t.Fatal(err)
		}
		rss, err = c.GetRealServers(ctx, vs)
		if err != nil || rss[0].Weight != 0 || rss[0].InactiveConn != 1 {
			t.Errorf("after weight 0: %+v, %v; want weight 0 InactiveConn 1", rss, err)
		}
		// Deleted and added again in one send, it comes back from the kernel's trash
		// with its connection (the order keeping of sh and mh relies on it).
		errs := c.Write(ctx, []Write{{Kind: WriteDeleteRealServer, VS: vs, RS: rs}, {Kind: WriteAddRealServer, VS: vs, RS: &RealServer{Address: rs.Address, Port: rs.Port, Weight: 0}}})
		if errs[0] != nil || errs[1] != nil {
			t.Fatalf("delete and add again: %v", errs)
		}
		rss, err = c.GetRealServers(ctx, vs)
		if err != nil || len(rss) != 1 || rss[0].InactiveConn != 1 {
			t.Errorf("after delete and add again: %+v, %v; want InactiveConn 1 kept", rss, err)
		}
	})
}

// TestVMForeignServicesIgnored checks that a firewall-mark service made by another
// tool is left out of GetVirtualServers rather than failing the listing.
func TestVMForeignServicesIgnored(t *testing.T) {
	netns.Run(t, func(t *testing.T) {
		c := newVMClient(t)
		c.mu.Lock()
		err := c.handle.NewService(&libipvs.Service{FWMark: 7, SchedName: "rr", AddressFamily: 2, Netmask: 0xffffffff})
		c.mu.Unlock()
		if err != nil {
			t.Fatalf("creating a fwmark service: %v", err)
		}
		ctx := context.Background()
		vs := &VirtualServer{Address: net.ParseIP("10.0.0.1"), Protocol: UDP, Port: 53, Scheduler: "rr"}
		if err := c.AddVirtualServer(ctx, vs); err != nil {
			t.Fatal(err)
		}
		list, err := c.GetVirtualServers(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(list) != 1 || list[0].Key() != vs.Key() {
			t.Errorf("GetVirtualServers = %v, want only %s", list, vs)
		}
	})
}

// TestVMNamespacePath checks New(path) programs the namespace at path, not the
// caller's.
func TestVMNamespacePath(t *testing.T) {
	netns.Run(t, func(t *testing.T) {
		if out, err := exec.Command("ip", "netns", "add", "kpv-ipvs").CombinedOutput(); err != nil {
			t.Fatalf("ip netns add: %v\n%s", err, out)
		}
		defer exec.Command("ip", "netns", "delete", "kpv-ipvs").Run()
		// Without any address the namespace has no local routing table, and the
		// kernel refuses an IPv4 real server whose address type it cannot tell
		// (inet_addr_type: EINVAL).
		if out, err := exec.Command("ip", "-n", "kpv-ipvs", "link", "set", "lo", "up").CombinedOutput(); err != nil {
			t.Fatalf("ip link set lo up: %v\n%s", err, out)
		}
		other, err := New("/run/netns/kpv-ipvs")
		if err != nil {
			t.Fatal(err)
		}
		defer other.Close()
		ctx := context.Background()
		vs := &VirtualServer{Address: net.ParseIP("10.0.0.1"), Protocol: TCP, Port: 80, Scheduler: "rr"}
		if err := other.AddVirtualServer(ctx, vs); err != nil {
			t.Fatal(err)
		}
		if err := other.AddRealServer(ctx, vs, &RealServer{Address: net.ParseIP("10.1.0.1"), Port: 8080, Weight: 1}); err != nil {
			t.Fatal(err)
		}
		if list, err := newVMClient(t).GetVirtualServers(ctx); err != nil || len(list) != 0 {
			t.Errorf("caller's namespace holds %v (%v), want nothing", list, err)
		}
		// The bulk read's proc table is the target namespace's too.
		all, err := other.GetAll(ctx, ipfamily.Any, nil)
		if err != nil || len(all) != 1 || len(all[0].RealServers) != 1 || other.perServiceReads != 0 {
			t.Errorf("GetAll in the target namespace = %v, %v (%d per-server dumps); want 1 virtual server with 1 real server from the proc table", all, err, other.perServiceReads)
		}
		out, err := exec.Command("ip", "netns", "exec", "kpv-ipvs", "ipvsadm", "-Ln").CombinedOutput()
		if err != nil {
			t.Fatalf("ipvsadm: %v\n%s", err, out)
		}
		if !strings.Contains(string(out), "TCP  10.0.0.1:80 rr") {
			t.Errorf("ipvsadm -Ln in the target namespace:\n%s", out)
		}
	})
}

// BenchmarkVMGetAll compares the two ways of reading the whole table at the
// scale of issue 15: KPI_BENCH_VS virtual servers (default 10,000) x 4 real
// servers, read once with GetVirtualServers plus GetRealServers per virtual
// server (what a full reconcile did) and once with GetAll. Run it with
// -benchtime 1x: writing the table takes a while under TCG.
func BenchmarkVMGetAll(b *testing.B) {
	nvs := 10000
	if v := os.Getenv("KPI_BENCH_VS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 60000 {
			b.Fatalf("KPI_BENCH_VS=%q: want 1-60000", v)
		}
		nvs = n
	}
	const perVS = 4
	netns.RunBenchmark(b, func(b *testing.B) {
		c, err := New("")
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		ctx := context.Background()
		start := time.Now()
		for s := 0; s < nvs; s++ {
			vs := &VirtualServer{Address: net.IPv4(10, 96, byte(s>>8), byte(s)), Protocol: TCP, Port: 80, Scheduler: "rr"}
			if err := c.AddVirtualServer(ctx, vs); err != nil {
				b.Fatal(err)
			}
			for r := 0; r < perVS; r++ {
				rs := &RealServer{Address: net.IPv4(10, byte(128+r), byte(s>>8), byte(s)), Port: 8080, Weight: 1}
				if err := c.AddRealServer(ctx, vs, rs); err != nil {
					b.Fatal(err)
				}
			}
		}
		write := time.Since(start)
		b.ResetTimer()
		var perServer, bulk time.Duration
		for i := 0; i < b.N; i++ {
			start = time.Now()
			vss, err := c.GetVirtualServers(ctx)
			if err != nil || len(vss) != nvs {
				b.Fatalf("listed %d (%v)", len(vss), err)
			}
			nrs := 0
			for _, vs := range vss {
				rss, err := c.GetRealServers(ctx, vs)
				if err != nil {
					b.Fatal(err)
				}
				nrs += len(rss)
			}
			perServer += time.Since(start)
			if nrs != nvs*perVS {
				b.Fatalf("one by one: %d real servers, want %d", nrs, nvs*perVS)
			}
			start = time.Now()
			all, err := c.GetAll(ctx, ipfamily.Any, nil)
			bulk += time.Since(start)
			if err != nil || len(all) != nvs {
				b.Fatalf("GetAll: %d virtual servers (%v)", len(all), err)
			}
			nrs = 0
			for _, d := range all {
				nrs += len(d.RealServers)
			}
			if nrs != nvs*perVS || c.perServiceReads != 0 {
				b.Fatalf("GetAll: %d real servers, want %d (%d per-server dumps)", nrs, nvs*perVS, c.perServiceReads)
			}
		}
		// Where GetAll's time goes: the netlink service dump, the proc table.
		start = time.Now()
		if _, err := c.GetVirtualServers(ctx); err != nil {
			b.Fatal(err)
		}
		vsDump := time.Since(start)
		start = time.Now()
		c.mu.Lock()
		table, err := c.readProcTable()
		c.mu.Unlock()
		if err != nil || len(table) != nvs {
			b.Fatalf("proc table: %d virtual servers (%v)", len(table), err)
		}
		procRead := time.Since(start)
		// The floor: the kernel printing the table for cat (one process).
		start = time.Now()
		if out, err := exec.Command("cat", "/proc/net/ip_vs").Output(); err != nil || len(out) == 0 {
			b.Fatalf("cat /proc/net/ip_vs: %v", err)
		}
		b.ReportMetric(float64(time.Since(start).Milliseconds()), "ms/cat-proc")
		b.ReportMetric(float64(vsDump.Milliseconds()), "ms/service-dump")
		b.ReportMetric(float64(procRead.Milliseconds()), "ms/proc-read+parse")
		b.ReportMetric(float64(write.Milliseconds()), "ms/write-once")
		b.ReportMetric(float64(perServer.Milliseconds())/float64(b.N), "ms/one-by-one")
		b.ReportMetric(float64(bulk.Milliseconds())/float64(b.N), "ms/getall")
		b.ReportMetric(float64(nvs), "virtual-servers")
	})
}

// BenchmarkVMWrite compares writing KPI_BENCH_VS virtual servers (default
// 10,000) x 4 real servers one request at a time (what the proxier does) with
// Write (pipelined, writeChunk requests per send). Run with -benchtime 1x.
func BenchmarkVMWrite(b *testing.B) {
	nvs := 10000
	if v := os.Getenv("KPI_BENCH_VS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 60000 {
			b.Fatalf("KPI_BENCH_VS=%q: want 1-60000", v)
		}
		nvs = n
	}
	const perVS = 4
	netns.RunBenchmark(b, func(b *testing.B) {
		c, err := New("")
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		ctx := context.Background()
		var writes []Write
		for s := 0; s < nvs; s++ {
			vs := &VirtualServer{Address: net.IPv4(10, 96, byte(s>>8), byte(s)), Protocol: TCP, Port: 80, Scheduler: "rr"}
			writes = append(writes, Write{Kind: WriteAddVirtualServer, VS: vs})
			for r := 0; r < perVS; r++ {
				writes = append(writes, Write{Kind: WriteAddRealServer, VS: vs, RS: &RealServer{Address: net.IPv4(10, byte(128+r), byte(s>>8), byte(s)), Port: 8080, Weight: 1}})
			}
		}
		check := func(what string) {
			all, err := c.GetAll(ctx, ipfamily.Any, nil)
			n := 0
			for _, d := range all {
				n += len(d.RealServers)
			}
			if err != nil || len(all) != nvs || n != nvs*perVS {
				b.Fatalf("%s: %d virtual servers, %d real servers (%v)", what, len(all), n, err)
			}
		}
		oneByOne := func() time.Duration {
			if err := c.Flush(ctx); err != nil {
				b.Fatal(err)
			}
			start := time.Now()
			for _, w := range writes {
				var err error
				if w.Kind == WriteAddVirtualServer {
					err = c.AddVirtualServer(ctx, w.VS)
				} else {
					err = c.AddRealServer(ctx, w.VS, w.RS)
				}
				if err != nil {
					b.Fatal(err)
				}
			}
			d := time.Since(start)
			check("one by one")
			return d
		}
		pipelined := func() time.Duration {
			if err := c.Flush(ctx); err != nil {
				b.Fatal(err)
			}
			start := time.Now()
			for j, err := range c.Write(ctx, writes) {
				if err != nil {
					b.Fatalf("write %d: %v", j, err)
				}
			}
			d := time.Since(start)
			check("pipelined")
			return d
		}
		b.ResetTimer()
		var single, batch time.Duration
		// The write after a flush of 10k virtual servers is much slower (the
		// kernel frees the flushed table in the background), so a fair
		// comparison writes into a fresh namespace of a fresh VM:
		// KPI_BENCH_WRITE_MODE=one-by-one or pipelined measures only that.
		mode := os.Getenv("KPI_BENCH_WRITE_MODE")
		for i := 0; i < b.N; i++ {
			if mode != "pipelined" {
				single += oneByOne()
			}
			if mode != "one-by-one" {
				batch += pipelined()
			}
		}
		if mode != "pipelined" {
			b.ReportMetric(float64(single.Milliseconds())/float64(b.N), "ms/one-by-one")
		}
		if mode != "one-by-one" {
			b.ReportMetric(float64(batch.Milliseconds())/float64(b.N), "ms/pipelined")
		}
		b.ReportMetric(float64(len(writes)), "writes")
	})
}

// BenchmarkVMSync measures the netlink cost the proxier pays per object: adding
// 500 virtual servers with 2 real servers each, then one full dump of all of them
// (GetVirtualServers plus GetRealServers per service, as a full reconcile does).
func BenchmarkVMSync(b *testing.B) {
	netns.RunBenchmark(b, func(b *testing.B) {
		c, err := New("")
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		ctx := context.Background()
		const services = 500
		for i := 0; i < b.N; i++ {
			if err := c.Flush(ctx); err != nil {
				b.Fatal(err)
			}
			start := time.Now()
			var vss []*VirtualServer
			for s := 0; s < services; s++ {
				vs := &VirtualServer{Address: net.IPv4(10, 0, byte(s>>8), byte(s)), Protocol: TCP, Port: 80, Scheduler: "rr"}
				vss = append(vss, vs)
				if err := c.AddVirtualServer(ctx, vs); err != nil {
					b.Fatal(err)
				}
				for r := 1; r <= 2; r++ {
					rs := &RealServer{Address: net.IPv4(10, 1, byte(s>>8), byte(s)), Port: uint16(8000 + r), Weight: 1}
					if err := c.AddRealServer(ctx, vs, rs); err != nil {
						b.Fatal(err)
					}
				}
			}
			write := time.Since(start)
			start = time.Now()
			list, err := c.GetVirtualServers(ctx)
			if err != nil || len(list) != services {
				b.Fatalf("listed %d (%v)", len(list), err)
			}
			for _, vs := range vss {
				if _, err := c.GetRealServers(ctx, vs); err != nil {
					b.Fatal(err)
				}
			}
			read := time.Since(start)
			b.ReportMetric(float64(write.Microseconds())/float64(services*3), "us/write")
			b.ReportMetric(float64(read.Milliseconds()), "ms/fulldump")
		}
	})
}

// TestVMServiceDumpMatchesMoby: the family-filtered service dump (dump.go) parses
// every virtual server exactly as moby/ipvs's GetServices does (both families, a
// firewall-mark service, persistence, sh flags, counters after traffic-free
// creation), and a family filter returns that family's only. It also times both
// reads of 2,000 IPv4 virtual servers for the IPv6 family, for the log.
func TestVMServiceDumpMatchesMoby(t *testing.T) {
	netns.Run(t, func(t *testing.T) {
		c := newVMClient(t)
		ctx := context.Background()
		c.mu.Lock()
		err := c.handle.NewService(&libipvs.Service{FWMark: 7, SchedName: "rr", AddressFamily: 2, Netmask: 0xffffffff})
		c.mu.Unlock()
		if err != nil {
			t.Fatalf("creating a fwmark service: %v", err)
		}
		for _, vs := range []*VirtualServer{
			{Address: net.ParseIP("10.0.0.1"), Protocol: TCP, Port: 80, Scheduler: "rr"},
			{Address: net.ParseIP("10.0.0.2"), Protocol: UDP, Port: 53, Scheduler: "sh", Flags: FlagSchedSH1 | FlagSchedSH2},
			{Address: net.ParseIP("10.0.0.3"), Protocol: SCTP, Port: 9, Scheduler: "rr", Flags: FlagPersistent, Timeout: 10800},
			{Address: net.ParseIP("fd00::1"), Protocol: TCP, Port: 80, Scheduler: "wrr"},
			{Address: net.ParseIP("fd00::2"), Protocol: UDP, Port: 53, Scheduler: "rr", Flags: FlagPersistent, Timeout: 60},
		} {
			if err := c.AddVirtualServer(ctx, vs); err != nil {
				t.Fatal(err)
			}
		}
		c.mu.Lock()
		want, err := c.handle.GetServices()
		var got, v4, v6 []*libipvs.Service
		var errs [3]error
		if err == nil {
			got, errs[0] = c.dumpServices(ipfamily.Any)
			v4, errs[1] = c.dumpServices(ipfamily.IPv4)
			v6, errs[2] = c.dumpServices(ipfamily.IPv6)
		}
		c.mu.Unlock()
		if err != nil || errs != [3]error{} {
			t.Fatalf("dumps: moby %v, ours %v", err, errs)
		}
		text := func(svcs []*libipvs.Service) string {
			var lines []string
			for _, s := range svcs {
				lines = append(lines, fmt.Sprintf("af=%d proto=%d addr=%s port=%d fwmark=%d sched=%s flags=%#x timeout=%d netmask=%#x conns=%d in=%d/%d out=%d/%d",
					s.AddressFamily, s.Protocol, s.Address, s.Port, s.FWMark, s.SchedName, s.Flags, s.Timeout, s.Netmask,
					s.Stats.Connections, s.Stats.PacketsIn, s.Stats.BytesIn, s.Stats.PacketsOut, s.Stats.BytesOut))
			}
			return strings.Join(sortedStrings(lines), "\n")
		}
		if text(got) != text(want) || len(want) != 6 {
			t.Errorf("our dump:\n%s\nmoby's (want 6 services):\n%s", text(got), text(want))
		}
		var w4, w6 []*libipvs.Service
		for _, s := range want {
			if s.AddressFamily == uint16(ipfamily.IPv4) {
				w4 = append(w4, s)
			} else {
				w6 = append(w6, s)
			}
		}
		if text(v4) != text(w4) || text(v6) != text(w6) {
			t.Errorf("by family: IPv4\n%s\nIPv6\n%s\nwant\n%s\n%s", text(v4), text(v6), text(w4), text(w6))
		}

		// Scale: the IPv6 read of 2,000 IPv4 virtual servers.
		var writes []Write
		for i := range 2000 {
			writes = append(writes, Write{Kind: WriteAddVirtualServer, VS: &VirtualServer{Address: net.IPv4(10, 2, byte(i/250), byte(1+i%250)), Protocol: TCP, Port: 80, Scheduler: "rr"}})
		}
		for i, err := range c.Write(ctx, writes) {
			if err != nil {
				t.Fatalf("write %d: %v", i, err)
			}
		}
		c.mu.Lock()
		start := time.Now()
		all, err := c.handle.GetServices()
		mobyTook := time.Since(start)
		start = time.Now()
		none, err2 := c.dumpServices(ipfamily.IPv6)
		oursTook := time.Since(start)
		c.mu.Unlock()
		if err != nil || err2 != nil || len(all) != 2006 || len(none) != 2 {
			t.Fatalf("2,006 virtual servers: moby %d (%v), ours for IPv6 %d (%v), want 2", len(all), err, len(none), err2)
		}
		t.Logf("IPv6 read of 2,004 IPv4 and 2 IPv6 virtual servers: moby's GetServices %v, the family dump %v", mobyTook, oursTook)
	})
}
