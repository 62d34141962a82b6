package httpserver

// Addresses: 10.0.0.0/24 in fake connections (no socket).

import (
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// fakeConn is a connection from addr ("10.0.0.1:7"); only the table's methods
// work.
type fakeConn struct {
	net.Conn
	addr   *net.TCPAddr
	closed bool
}

func (c *fakeConn) RemoteAddr() net.Addr { return c.addr }
func (c *fakeConn) Close() error         { c.closed = true; return nil }

// tableStep is one event: a connection accepted (admit, "10.0.0.1:7"), or a
// tracked connection changing class (conn and class), or closing (conn and
// close).
type tableStep struct {
	admit    string
	conn     string
	class    connClass
	close    bool
	wantShed string // the connection admit sheds, "" for none
}

func TestConnTableSheds(t *testing.T) {
	const a, b, c, d, e = "10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4", "10.0.0.5"
	admit := func(conn, shed string) tableStep { return tableStep{admit: conn, wantShed: shed} }
	set := func(conn string, class connClass) tableStep { return tableStep{conn: conn, class: class} }
	closed := func(conn string) tableStep { return tableStep{conn: conn, close: true} }
	for _, tc := range []struct {
		name             string
		perSource, total int
		steps            []tableStep
		want             string
	}{{
		name:      "per source: idle, then headers oldest first, then active",
		perSource: 3,
		steps: []tableStep{
			admit(a+":1", ""), admit(a+":2", ""), admit(a+":3", ""),
			set(a+":1", classActive), set(a+":2", classIdle),
			admit(a+":4", a+":2"), // the idle one
			admit(a+":5", a+":3"), // the oldest waiting for its headers
			admit(a+":6", a+":4"),
			set(a+":5", classActive), set(a+":6", classActive),
			admit(a+":7", a+":1"), // only active ones left: the oldest, never the new one
		},
		want: "10.0.0.1 3 headers:7 active:5,6\n",
	}, {
		name:      "per source: other sources are not touched",
		perSource: 2,
		steps: []tableStep{
			admit(b+":1", ""), set(b+":1", classIdle),
			admit(a+":1", ""), admit(a+":2", ""),
			admit(a+":3", a+":1"), admit(a+":4", a+":2"),
		},
		want: "10.0.0.1 2 headers:3,4\n10.0.0.2 1 idle:1\n",
	}, {
		name:  "total: from the source holding the most, even its active ones",
		total: 4,
		steps: []tableStep{
			admit(a+":1", ""), admit(a+":2", ""), admit(a+":3", ""), admit(b+":1", ""),
			set(a+":1", classActive), set(a+":2", classActive), set(a+":3", classActive),
			admit(c+":1", a+":1"),
			// a and c hold 2 each: the lower class (headers) goes before active.
			admit(c+":2", c+":1"),
			admit(d+":1", a+":2"),
		},
		want: "10.0.0.1 1 active:3\n10.0.0.2 1 headers:1\n10.0.0.3 1 headers:2\n10.0.0.4 1 headers:1\n",
	}, {
		name:  "total: one connection per source, a fresh client is still served",
		total: 3,
		steps: []tableStep{
			admit(a+":1", ""), admit(b+":1", ""), admit(c+":1", ""),
			set(b+":1", classIdle),
			admit(d+":1", b+":1"), // idle first
			admit(e+":1", a+":1"), // then the oldest waiting for its headers
			set(c+":1", classActive),
			admit(a+":2", d+":1"),
		},
		want: "10.0.0.1 1 headers:2\n10.0.0.3 1 active:1\n10.0.0.5 1 headers:1\n",
	}, {
		name:      "both caps, and closed connections free room",
		perSource: 2, total: 3,
		steps: []tableStep{
			admit(a+":1", ""), admit(a+":2", ""), admit(b+":1", ""),
			closed(a + ":1"),
			admit(c+":1", ""),      // 3 open again: nothing shed
			set(a+":1", classIdle), // closed: ignored
			admit(b+":2", b+":1"),  // b now holds the most
		},
		want: "10.0.0.1 1 headers:2\n10.0.0.2 1 headers:2\n10.0.0.3 1 headers:1\n",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			table := newConnTable(tc.perSource, tc.total)
			conns := map[string]*trackedConn{}
			for i, step := range tc.steps {
				switch {
				case step.admit != "":
					addr, err := net.ResolveTCPAddr("tcp", step.admit)
					if err != nil {
						t.Fatal(err)
					}
					fc := &fakeConn{addr: addr}
					tracked, victim := table.admit(fc)
					conns[step.admit] = tracked
					shed := ""
					if victim != nil {
						shed = victim.RemoteAddr().String()
						_ = victim.closeConn()
						if !victim.Conn.(*fakeConn).closed {
							t.Errorf("step %d: victim %s not closed", i, shed)
						}
					}
					if shed != step.wantShed {
						t.Errorf("step %d: admitting %s shed %q, want %q", i, step.admit, shed, step.wantShed)
					}
				case step.close:
					_ = conns[step.conn].Close()
				default:
					table.setClass(conns[step.conn], step.class)
				}
			}
			if diff := cmp.Diff(tc.want, table.dump()); diff != "" {
				t.Errorf("table (-want +got):\n%s", diff)
			}
			open := 0
			for _, line := range strings.Split(strings.TrimSpace(tc.want), "\n") {
				var addr string
				var n int
				if _, err := fmt.Sscanf(line, "%s %d", &addr, &n); err != nil {
					t.Fatal(err)
				}
				open += n
			}
			if got := table.openConns(); got != open {
				t.Errorf("open %d, want %d", got, open)
			}
		})
	}
}

// TestConnTableIPv4Mapped: a client reaching an IPv6 listener over IPv4 counts
// as its IPv4 address.
func TestConnTableIPv4Mapped(t *testing.T) {
	table := newConnTable(1, 0)
	table.admit(&fakeConn{addr: &net.TCPAddr{IP: net.ParseIP("::ffff:10.0.0.1"), Port: 1}})
	_, victim := table.admit(&fakeConn{addr: &net.TCPAddr{IP: net.ParseIP("10.0.0.1").To4(), Port: 2}})
	if victim == nil || table.dump() != "10.0.0.1 1 headers:2\n" {
		t.Errorf("victim %v, table %q", victim, table.dump())
	}
}
