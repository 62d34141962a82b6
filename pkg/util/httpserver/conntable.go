package httpserver

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
)

// connClass is what a connection is doing, in shedding order: a class is shed
// before the next one.
type connClass int

const (
	// classIdle: a keep-alive connection between requests (http.StateIdle). Its
	// client loses nothing but a reuse.
	classIdle connClass = iota
	// classHeaders: accepted, and the request headers have not all arrived
	// (http.StateNew). A real client sends them at once; this is a slow or
	// silent one, or a fresh one that is about to.
	classHeaders
	// classActive: a request is being served or its response written
	// (http.StateActive, http.StateHijacked).
	classActive
	numClasses
)

var classNames = [numClasses]string{"idle", "headers", "active"}

func (c connClass) String() string { return classNames[c] }

// connTable tracks the open connections of one listener by source address and
// class, and chooses which one to shed. It does no I/O: the listener closes the
// victims it returns.
type connTable struct {
	perSource, total int // caps; 0 means none

	mu      sync.Mutex
	sources map[netip.Addr]*sourceConns
	open    int
	seq     uint64 // orders entries into a class: lower is older
}

// sourceConns are the connections of one source address, one list per class,
// oldest first.
type sourceConns struct {
	addr    netip.Addr
	count   int
	byClass [numClasses]connList
}

// trackedConn is a connection the listener handed out. Its table fields are
// guarded by table.mu.
type trackedConn struct {
	net.Conn
	table *connTable

	source     *sourceConns // nil once removed
	class      connClass
	seq        uint64
	prev, next *trackedConn

	closeOnce sync.Once
	closeErr  error
}

// connList is an intrusive doubly linked list of connections, oldest first.
type connList struct {
	head, tail *trackedConn
}

func (l *connList) pushBack(c *trackedConn) {
	c.prev, c.next = l.tail, nil
	if l.tail != nil {
		l.tail.next = c
	} else {
		l.head = c
	}
	l.tail = c
}

func (l *connList) remove(c *trackedConn) {
	if c.prev != nil {
		c.prev.next = c.next
	} else {
		l.head = c.next
	}
	if c.next != nil {
		c.next.prev = c.prev
	} else {
		l.tail = c.prev
	}
	c.prev, c.next = nil, nil
}

func newConnTable(perSource, total int) *connTable {
	return &connTable{perSource: perSource, total: total, sources: map[netip.Addr]*sourceConns{}}
}

// sourceAddr is the address connections are counted by: the remote IP (an
// IPv4-mapped IPv6 address as IPv4), the zero Addr for a non-IP connection.
func sourceAddr(c net.Conn) netip.Addr {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return a.AddrPort().Addr().Unmap()
	}
	return netip.Addr{}
}

// admit tracks c as a connection waiting for its headers and returns it, with
// the connection to shed to keep within the caps (nil if none). The victim is
// already out of the table; the caller closes it. A new connection is never its
// own victim.
func (t *connTable) admit(c net.Conn) (tc, victim *trackedConn) {
	addr := sourceAddr(c)
	t.mu.Lock()
	defer t.mu.Unlock()
	src := t.sources[addr]
	if src == nil {
		src = &sourceConns{addr: addr}
		t.sources[addr] = src
	}
	tc = &trackedConn{Conn: c, table: t, source: src}
	t.enter(tc, classHeaders)
	src.count++
	t.open++
	switch {
	case t.perSource > 0 && src.count > t.perSource:
		victim = src.victim(tc)
	case t.total > 0 && t.open > t.total:
		victim = t.victim(tc)
	}
	if victim != nil {
		t.removeLocked(victim)
	}
	return tc, victim
}

// shedAny removes and returns the connection the total cap would shed (nil when
// none is open), for when there is no room for a new one at all.
func (t *connTable) shedAny() *trackedConn {
	t.mu.Lock()
	defer t.mu.Unlock()
	v := t.victim(nil)
	if v != nil {
		t.removeLocked(v)
	}
	return v
}

// setClass moves c to class (a no-op once c is removed).
func (t *connTable) setClass(c *trackedConn, class connClass) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if c.source == nil || c.class == class {
		return
	}
	c.source.byClass[c.class].remove(c)
	t.enter(c, class)
}

// remove forgets c (a no-op once removed).
func (t *connTable) remove(c *trackedConn) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.removeLocked(c)
}

func (t *connTable) enter(c *trackedConn, class connClass) {
	t.seq++
	c.class, c.seq = class, t.seq
	c.source.byClass[class].pushBack(c)
}

func (t *connTable) removeLocked(c *trackedConn) {
	src := c.source
	if src == nil {
		return
	}
	src.byClass[c.class].remove(c)
	c.source = nil
	src.count--
	t.open--
	if src.count == 0 {
		delete(t.sources, src.addr)
	}
}

// victim is the connection of s to shed first, other than except: the
// lowest class, the oldest in it.
func (s *sourceConns) victim(except *trackedConn) *trackedConn {
	for class := range numClasses {
		for c := s.byClass[class].head; c != nil; c = c.next {
			if c != except {
				return c
			}
		}
	}
	return nil
}

// victim is the connection to shed first among all, other than except: from
// the source holding the most connections, its own first victim; between
// sources holding as many, the lower class, then the older. Linear in the
// number of sources, which the total cap bounds.
func (t *connTable) victim(except *trackedConn) *trackedConn {
	var best *trackedConn
	bestCount := 0
	for _, s := range t.sources {
		if s.count < bestCount {
			continue
		}
		v := s.victim(except)
		if v == nil {
			continue
		}
		if s.count > bestCount || v.class < best.class || (v.class == best.class && v.seq < best.seq) {
			best, bestCount = v, s.count
		}
	}
	return best
}

// openConns is the number of connections tracked.
func (t *connTable) openConns() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.open
}

// dump prints the table as sorted text, one line per source: its address, its
// count and, per class with connections, their client ports oldest first (tests
// identify their connections by port).
func (t *connTable) dump() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var lines []string
	for _, s := range t.sources {
		line := fmt.Sprintf("%s %d", s.addr, s.count)
		for class := range numClasses {
			var ports []string
			for c := s.byClass[class].head; c != nil; c = c.next {
				ports = append(ports, fmt.Sprint(remotePort(c)))
			}
			if len(ports) > 0 {
				line += fmt.Sprintf(" %s:%s", class, strings.Join(ports, ","))
			}
		}
		lines = append(lines, line)
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n") + "\n"
}

func remotePort(c net.Conn) int {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return a.Port
	}
	return 0
}
