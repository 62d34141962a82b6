package ipvs

// Test addresses: 10.96.0.0/16 and fd00::/64 virtual servers, 10.244.0.0/16
// and fd01::/64 real servers.

import (
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// procSample is /proc/net/ip_vs as kernel 6.1 prints it (ip_vs_info_seq_show),
// with a firewall-mark service and a tunnelled destination.
const procSample = `IP Virtual Server version 1.2.1 (size=4096)
Prot LocalAddress:Port Scheduler Flags
  -> RemoteAddress:Port Forward Weight ActiveConn InActConn
TCP  0A600001:0050 rr 
  -> 0AF40009:1F90      Masq    1      3          7         
  -> 0AF4000A:1F90      Masq    0      0          12        
UDP  0A60000A:0035 rr ops 
FWM  00000007 rr 
  -> 0AF40001:0050      Masq    1      0          0         
TCP  [fd00:0000:0000:0000:0000:0000:0000:0001]:01BB sh persistent 15000 00000080
  -> [fd01:0000:0000:0000:0000:0000:00ff:0002]:20FB      Masq    65535  0          0         
SCTP  0A600002:FFFF wrr persistent 2700000 FFFFFFFF
  -> 0AF40002:0001      Tunnel  2      0          0         
`

func TestParseProcTable(t *testing.T) {
	table, err := parseProcTable([]byte(procSample))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for k, rss := range table {
		var b strings.Builder
		b.WriteString(protoNames[k.proto] + " " + procKeyAddr(k))
		if len(rss) == 0 {
			b.WriteString(" (none)")
		}
		for _, rs := range rss {
			b.WriteString(" " + rs.Key() + " " + strconv.Itoa(rs.Weight) + "/" + strconv.Itoa(rs.ActiveConn) + "/" + strconv.Itoa(rs.InactiveConn))
		}
		got = append(got, b.String())
	}
	want := []string{
		"SCTP 10.96.0.2:65535 10.244.0.2:1 2/0/0",
		"TCP 10.96.0.1:80 10.244.0.9:8080 1/3/7 10.244.0.10:8080 0/0/12",
		"TCP [fd00::1]:443 [fd01::ff:2]:8443 65535/0/0",
		"UDP 10.96.0.10:53 (none)",
	}
	if diff := cmp.Diff(want, sortedStrings(got)); diff != "" {
		t.Errorf("parsed (-want +got):\n%s", diff)
	}
}

func TestParseProcTableErrors(t *testing.T) {
	head := "IP Virtual Server version 1.2.1 (size=4096)\nProt LocalAddress:Port Scheduler Flags\n  -> RemoteAddress:Port Forward Weight ActiveConn InActConn\n"
	for _, body := range []string{
		"TCP  0A600001 rr\n",                               // no port
		"TCP  0A6000:0050 rr\n",                            // short address
		"TCP  [fd00::zz]:0050 rr\n",                        // bad IPv6
		"TCP  0A600001:0050 rr\n  -> 0AF40009:1F90 Masq\n", // short destination
		"TCP  0A600001:0050 rr\n  -> 0AF40009:1F90 Masq x 0 0\n",
		"UDP  0A600001:10000 rr\n", // port over 16 bits
	} {
		if _, err := parseProcTable([]byte(head + body)); err == nil {
			t.Errorf("parsing %q: no error", body)
		}
	}
	if table, err := parseProcTable([]byte(head)); err != nil || len(table) != 0 {
		t.Errorf("an empty table: %v, %v", table, err)
	}
}

// FuzzParseProcTable: the parser never panics, and every destination it
// returns belongs to a TCP, UDP or SCTP service.
func FuzzParseProcTable(f *testing.F) {
	f.Add([]byte(procSample))
	f.Add([]byte("a\nb\nc\n  -> 0AF40009:1F90 Masq 1 0 0\nTCP [::]:0 rr\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		table, err := parseProcTable(data)
		if err != nil {
			return
		}
		for k := range table {
			if protoNames[k.proto] == "" {
				t.Errorf("key with protocol %d", k.proto)
			}
		}
	})
}

var protoNames = map[uint16]string{protoTCP: TCP, protoUDP: UDP, protoSCTP: SCTP}

func procKeyAddr(k procKey) string {
	vs := VirtualServer{Address: normalizeIP(k.addr[:]), Port: k.port}
	return strings.TrimPrefix(vs.Key(), "/")
}
