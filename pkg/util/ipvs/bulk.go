package ipvs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"

	libipvs "github.com/moby/ipvs"
	"github.com/vishvananda/netns"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/ipfamily"
)

// Reading the whole table at once.
//
// A full reconcile needs every virtual server with its real servers. Over
// generic netlink that is one service dump plus one destination dump per
// virtual server: the kernel refuses a second dump on a socket whose dump is
// still running (netlink's cb_running: EBUSY), and IPVS's destination dump
// always needs two passes, so each virtual server costs a request and two reads.
// In the test VM under TCG, `ipvsadm -Ln` of 10,000 virtual servers x 4 takes
// 8 s that way, and `cat /proc/net/ip_vs` 0.29 s.
//
// /proc/net/ip_vs alone is not enough: it prints no sh/mh scheduler flags, the
// persistence timeout in jiffies (HZ is not known in user space), the ops flag
// for IPv4 services only, and no counters. So GetAll takes the virtual servers
// from one netlink service dump (every attribute exact, as GetVirtualServers
// returns them) and their real servers from one read of the proc table, which
// prints every destination with its address, port, forwarding method, weight
// and both connection counters: all a RealServer holds. A virtual server the
// proc table does not show (it came or went between the two reads, or the file
// cannot be read) gets its own destination dump, so the answer is always what
// GetRealServers would have said.

// VirtualServerDump is one virtual server with its real servers, as GetAll
// returns them.
type VirtualServerDump struct {
	VirtualServer *VirtualServer
	RealServers   []*RealServer
}

// procIPVSPath is the IPVS table of the calling thread's network namespace
// (/proc/net is the namespace of the process's first thread).
const procIPVSPath = "/proc/thread-self/net/ip_vs"

// openProcTable opens the IPVS proc table of the namespace at netnsPath (the
// caller's when empty). An open seq file stays bound to its namespace, so the
// Client keeps it and rewinds it for every read.
func openProcTable(netnsPath string) (*os.File, error) {
	if netnsPath == "" {
		return os.Open(procIPVSPath)
	}
	type result struct {
		f   *os.File
		err error
	}
	ch := make(chan result, 1)
	go func() {
		// The thread enters the target namespace and is never unlocked, so it
		// ends with this goroutine instead of going back to the scheduler in the
		// wrong namespace.
		runtime.LockOSThread()
		target, err := netns.GetFromPath(netnsPath)
		if err != nil {
			ch <- result{err: err}
			return
		}
		defer target.Close()
		if err := netns.Set(target); err != nil {
			ch <- result{err: err}
			return
		}
		f, err := os.Open(procIPVSPath)
		ch <- result{f, err}
	}()
	r := <-ch
	return r.f, r.err
}

// procKey identifies a virtual server in the proc table.
type procKey struct {
	proto uint16
	addr  [16]byte
	port  uint16
}

func procKeyOf(proto uint16, ip net.IP, port uint16) procKey {
	k := procKey{proto: proto, port: port}
	copy(k.addr[:], ip.To16())
	return k
}

// GetAll lists every address/port/protocol virtual server keep accepts (nil:
// all) with its real servers: what GetVirtualServers and a GetRealServers per
// virtual server return, read in bulk (see above). Firewall-mark services are
// left out, as in GetVirtualServers. When keep accepts none (the IPv6 proxier
// on an IPv4-only node), the proc table is not read.
func (c *Client) GetAll(ctx context.Context, af ipfamily.Family, keep func(*VirtualServer) bool) ([]VirtualServerDump, error) {
	var out []VirtualServerDump
	err := c.do(ctx, func(h *libipvs.Handle) error {
		svcs, err := c.dumpServices(af)
		if err != nil {
			return fmt.Errorf("dumping virtual servers: %w", err)
		}
		type kept struct {
			svc *libipvs.Service
			vs  *VirtualServer
		}
		var want []kept
		for _, svc := range svcs {
			if svc.FWMark != 0 {
				continue
			}
			vs, err := toVirtualServer(svc)
			if err != nil {
				return err
			}
			if keep == nil || keep(vs) {
				want = append(want, kept{svc, vs})
			}
		}
		var table map[procKey][]*RealServer
		if c.proc != nil && len(want) > 0 {
			// A failed read is not fatal: every virtual server then gets its own
			// destination dump below.
			table, _ = c.readProcTable()
		}
		out = make([]VirtualServerDump, 0, len(want))
		for _, k := range want {
			svc, vs := k.svc, k.vs
			rss, ok := table[procKeyOf(svc.Protocol, svc.Address, svc.Port)]
			if !ok {
				dsts, err := h.GetDestinations(svc)
				if err != nil {
					return fmt.Errorf("dumping real servers of %s: %w", vs, err)
				}
				rss = make([]*RealServer, 0, len(dsts))
				for _, d := range dsts {
					rss = append(rss, toRealServer(d))
				}
				c.perServiceReads++
			}
			out = append(out, VirtualServerDump{VirtualServer: vs, RealServers: rss})
		}
		return nil
	})
	if err != nil {
		return nil, errorf(err, "listing virtual servers with their real servers")
	}
	return out, nil
}

// readProcTable reads the proc table from its start. Callers hold c.mu.
func (c *Client) readProcTable() (map[procKey][]*RealServer, error) {
	if _, err := c.proc.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	buf := c.procBuf[:0]
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := c.proc.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if errors.Is(err, io.EOF) || (err == nil && n == 0) {
			break
		}
		if err != nil {
			return nil, err
		}
	}
	c.procBuf = buf
	return parseProcTable(buf)
}

// parseProcTable parses /proc/net/ip_vs (net/netfilter/ipvs/ip_vs_ctl.c,
// ip_vs_info_seq_show): three header lines, then per service
//
//	TCP  0A600001:0050 rr [ops ][persistent TIMEOUT NETMASK]
//	TCP  [fd00:0000:0000:0000:0000:0000:0000:0001]:0050 rr [persistent ...]
//	FWM  00000007 rr ...
//
// each followed by its destinations:
//
//	-> 0AF40009:1F90      Masq    1      0          0
//	-> [fd01:...:0001]:1F90      Masq    1      0          0
//
// (address and port in hex, network order printed big-endian). Firewall-mark
// services and their destinations are skipped.
func parseProcTable(data []byte) (map[procKey][]*RealServer, error) {
	// One allocation for all real servers, their pointers and their IPv4
	// addresses (a 10k x 4 table is 40k of each), instead of one per object.
	ndest := bytes.Count(data, []byte("->"))
	slab := make([]RealServer, 0, ndest)
	ptrs := make([]*RealServer, 0, ndest)
	v4 := make([]byte, 0, 4*ndest)
	table := make(map[procKey][]*RealServer, bytes.Count(data, []byte("\n"))-ndest)
	first := 0 // the current service's first pointer in ptrs
	var curKey procKey
	inService := false
	flush := func() {
		if inService {
			table[curKey] = ptrs[first:len(ptrs):len(ptrs)]
		}
	}
	var fields [8][]byte
	for lineNo := 1; len(data) > 0; lineNo++ {
		var line []byte
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line, data = data[:i], data[i+1:]
		} else {
			line, data = data, nil
		}
		if lineNo <= 3 {
			continue // "IP Virtual Server version ...", two column headers
		}
		n := splitFields(line, fields[:])
		if n == 0 {
			continue
		}
		if string(fields[0]) == "->" {
			if !inService {
				continue // a firewall-mark service's destination
			}
			if n < 6 {
				return nil, fmt.Errorf("line %d %q: too few fields for a destination", lineNo, line)
			}
			ip, port, err := parseProcAddrPort(fields[1], &v4)
			if err != nil {
				return nil, fmt.Errorf("line %d %q: %w", lineNo, line, err)
			}
			weight, ok1 := atoi(fields[3])
			active, ok2 := atoi(fields[4])
			inactive, ok3 := atoi(fields[5])
			if !ok1 || !ok2 || !ok3 {
				return nil, fmt.Errorf("line %d %q: bad counters", lineNo, line)
			}
			slab = append(slab, RealServer{Address: ip, Port: port, Weight: weight, ActiveConn: active, InactiveConn: inactive})
			ptrs = append(ptrs, &slab[len(slab)-1])
			continue
		}
		flush()
		inService, first = false, len(ptrs)
		var proto uint16
		switch string(fields[0]) {
		case "TCP":
			proto = protoTCP
		case "UDP":
			proto = protoUDP
		case "SCTP":
			proto = protoSCTP
		default:
			continue // FWM, or a protocol kube-proxy never programs
		}
		if n < 3 {
			return nil, fmt.Errorf("line %d %q: too few fields for a service", lineNo, line)
		}
		var scratch []byte
		ip, port, err := parseProcAddrPort(fields[1], &scratch)
		if err != nil {
			return nil, fmt.Errorf("line %d %q: %w", lineNo, line, err)
		}
		curKey, inService = procKeyOf(proto, ip, port), true
	}
	flush()
	return table, nil
}

// atoi parses a non-negative decimal number.
func atoi(b []byte) (int, bool) {
	if len(b) == 0 || len(b) > 10 {
		return 0, false
	}
	n := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}

// hexval parses up to 8 hex digits.
func hexval(b []byte) (uint32, bool) {
	if len(b) == 0 || len(b) > 8 {
		return 0, false
	}
	var v uint32
	for _, c := range b {
		switch {
		case c >= '0' && c <= '9':
			v = v<<4 | uint32(c-'0')
		case c >= 'A' && c <= 'F':
			v = v<<4 | uint32(c-'A'+10)
		case c >= 'a' && c <= 'f':
			v = v<<4 | uint32(c-'a'+10)
		default:
			return 0, false
		}
	}
	return v, true
}

// splitFields splits line at spaces into out, returning how many it filled.
func splitFields(line []byte, out [][]byte) int {
	n := 0
	for len(line) > 0 && n < len(out) {
		i := 0
		for i < len(line) && line[i] == ' ' {
			i++
		}
		line = line[i:]
		if len(line) == 0 {
			break
		}
		j := bytes.IndexByte(line, ' ')
		if j < 0 {
			j = len(line)
		}
		out[n] = line[:j]
		n++
		line = line[j:]
	}
	return n
}

// parseProcAddrPort parses "0A600001:0050" or "[fd00:0000:...:0001]:0050".
// IPv4 addresses are appended to *slab and returned as a slice of it.
func parseProcAddrPort(b []byte, slab *[]byte) (net.IP, uint16, error) {
	i := bytes.LastIndexByte(b, ':')
	if i < 0 {
		return nil, 0, fmt.Errorf("address %q: no port", b)
	}
	port, ok := hexval(b[i+1:])
	if !ok || port > 0xffff {
		return nil, 0, fmt.Errorf("address %q: bad port", b)
	}
	host := b[:i]
	if len(host) > 2 && host[0] == '[' && host[len(host)-1] == ']' {
		ip := net.ParseIP(string(host[1 : len(host)-1]))
		if ip == nil {
			return nil, 0, fmt.Errorf("address %q: bad IPv6 address", b)
		}
		return normalizeIP(ip), uint16(port), nil
	}
	v, ok := hexval(host)
	if !ok || len(host) != 8 {
		return nil, 0, fmt.Errorf("address %q: bad IPv4 address", b)
	}
	start := len(*slab)
	*slab = append(*slab, byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
	return net.IP((*slab)[start : start+4 : start+4]), uint16(port), nil
}
