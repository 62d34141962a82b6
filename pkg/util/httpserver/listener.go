package httpserver

import (
	"errors"
	"net"
	"net/http"
	"syscall"
)

// Listener is a net.Listener that accepts every connection at once and sheds
// others to keep within its caps (see Limit).
type Listener struct {
	net.Listener
	table *connTable
}

// maxShedForDescriptors bounds how many connections one Accept sheds when the
// process is out of file descriptors: each frees one, so the first normally
// lets the pending connection in; if something else takes it, net/http's
// accept loop backs off and calls again.
const maxShedForDescriptors = 4

// Accept returns the next connection, tracked, after shedding one if a cap
// requires it. When the process is out of descriptors, it sheds tracked
// connections to make room rather than leave new ones in the kernel's queue.
func (l *Listener) Accept() (net.Conn, error) {
	for shed := 0; ; shed++ {
		c, err := l.Listener.Accept()
		if err != nil {
			if shed < maxShedForDescriptors && outOfDescriptors(err) {
				if v := l.table.shedAny(); v != nil {
					v.shed()
					_ = v.closeConn() // here: the retry needs its descriptor
					continue
				}
			}
			return nil, err
		}
		tc, victim := l.table.admit(c)
		if victim != nil {
			victim.shed()
			// Close waits for the goroutine serving the victim to leave its
			// read or write, which under load takes a trip through the
			// scheduler: the accept loop must not wait for that.
			go victim.closeConn()
		}
		return tc, nil
	}
}

func outOfDescriptors(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE)
}

// Close closes the connection and stops tracking it. Safe to call more than
// once and concurrently (the server and a shedding Accept may both).
func (c *trackedConn) Close() error {
	c.table.remove(c)
	return c.closeConn()
}

// shed ends the connection without waiting for anything: its client is told
// at once, the goroutine serving it wakes up, and the close that follows
// resets it (nothing more is owed to it: the kernel frees the socket and what
// it still had to send). The caller closes it.
func (c *trackedConn) shed() {
	if tcp, ok := c.Conn.(*net.TCPConn); ok {
		_ = tcp.SetLinger(0)
		_ = tcp.CloseRead()
		_ = tcp.CloseWrite()
	}
}

func (c *trackedConn) closeConn() error {
	c.closeOnce.Do(func() { c.closeErr = c.Conn.Close() })
	return c.closeErr
}

// trackConnState is the http.Server ConnState hook of New: it tells the table
// of a connection from a Listener what the connection is doing (other
// connections are not tracked).
func trackConnState(c net.Conn, state http.ConnState) {
	tc, ok := c.(*trackedConn)
	if !ok {
		return
	}
	switch state {
	case http.StateNew:
		tc.table.setClass(tc, classHeaders)
	case http.StateActive, http.StateHijacked:
		tc.table.setClass(tc, classActive)
	case http.StateIdle:
		tc.table.setClass(tc, classIdle)
	case http.StateClosed:
		tc.table.remove(tc)
	}
}
