package main

// Roles for the two-node testbed (a second node and an outside network as
// network namespaces in the one VM):
//
//	e2e-agent relay --listen tcp:127.0.0.1:6443 --to unix:/run/kpi-apiserver.sock
//	    copies every connection to --to (a UNIX socket crosses network
//	    namespaces: node2 reaches the apiserver's guestfwd through it);
//	e2e-agent hold --addr VIP:PORT --interval 500ms
//	    one long-lived TCP connection: a line sent and its echo read back every
//	    interval until SIGTERM (a connection whose endpoint is drained under it);
//	e2e-agent lb --backends NODE:PORT=HEALTHURL,... --interval 50ms
//	    acts as an external load balancer: polls every backend's health URL,
//	    sends connections only to the backends answering 200.

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// echo answers every line the client sends with "NAME echo=LINE" until the
// client closes (or 10 minutes pass).
func echo(c net.Conn, name string) {
	_ = c.SetDeadline(time.Now().Add(10 * time.Minute))
	r := bufio.NewReader(c)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return
		}
		if _, err := fmt.Fprintf(c, "%s echo=%s\n", name, strings.TrimSpace(line)); err != nil {
			return
		}
	}
}

// localAddr parses --source: "IP" or "IP:PORT".
func localAddr(proto, source string) (net.Addr, error) {
	host, port := source, "0"
	if h, p, err := net.SplitHostPort(source); err == nil {
		host, port = h, p
	}
	ip := net.ParseIP(host)
	if ip == nil {
		return nil, fmt.Errorf("--source %q: not an IP address", source)
	}
	n, err := strconv.Atoi(port)
	if err != nil {
		return nil, fmt.Errorf("--source %q: bad port", source)
	}
	if proto == "udp" {
		return &net.UDPAddr{IP: ip, Port: n}, nil
	}
	return &net.TCPAddr{IP: ip, Port: n}, nil
}

// splitEndpoint parses "tcp:HOST:PORT" or "unix:/path".
func splitEndpoint(s string) (string, string, error) {
	network, addr, ok := strings.Cut(s, ":")
	if !ok || (network != "tcp" && network != "unix") || addr == "" {
		return "", "", fmt.Errorf("%q: want tcp:HOST:PORT or unix:/path", s)
	}
	return network, addr, nil
}

func runRelay(args []string) error {
	fs := flag.NewFlagSet("relay", flag.ContinueOnError)
	listen := fs.String("listen", "", "tcp:HOST:PORT or unix:/path to accept on")
	to := fs.String("to", "", "tcp:HOST:PORT or unix:/path to connect every connection to")
	if err := fs.Parse(args); err != nil {
		return err
	}
	lnet, laddr, err := splitEndpoint(*listen)
	if err != nil {
		return err
	}
	tnet, taddr, err := splitEndpoint(*to)
	if err != nil {
		return err
	}
	if lnet == "unix" {
		_ = os.Remove(laddr)
	}
	ln, err := net.Listen(lnet, laddr)
	if err != nil {
		return err
	}
	fmt.Printf("relay %s -> %s\n", *listen, *to)
	for {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		go func() {
			defer c.Close()
			up, err := net.DialTimeout(tnet, taddr, 10*time.Second)
			if err != nil {
				fmt.Printf("relay: %v\n", err)
				return
			}
			defer up.Close()
			done := make(chan struct{}, 2)
			cp := func(dst, src net.Conn) {
				_, _ = io.Copy(dst, src)
				if cw, ok := dst.(interface{ CloseWrite() error }); ok {
					_ = cw.CloseWrite()
				}
				done <- struct{}{}
			}
			go cp(up, c)
			go cp(c, up)
			<-done
			<-done
		}()
	}
}

func stopSignal() *atomic.Bool {
	var stop atomic.Bool
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	go func() { <-sigs; stop.Store(true) }()
	return &stop
}

// runHold keeps one TCP connection and prints "CONNECTED <greeting>", then
// "OK n <echo>" per exchange; the first failure prints "ERROR n <reason>" and
// ends it. SIGTERM closes the connection cleanly and prints a SUMMARY line.
func runHold(args []string) error {
	fs := flag.NewFlagSet("hold", flag.ContinueOnError)
	addr := fs.String("addr", "", "VIP:PORT")
	source := fs.String("source", "", "local IP to connect from")
	interval := fs.Duration("interval", 500*time.Millisecond, "pause between exchanges")
	timeout := fs.Duration("timeout", 3*time.Second, "timeout of the connect and of each exchange")
	if err := fs.Parse(args); err != nil {
		return err
	}
	stop := stopSignal()
	d := net.Dialer{Timeout: *timeout}
	if *source != "" {
		la, err := localAddr("tcp", *source)
		if err != nil {
			return err
		}
		d.LocalAddr = la
	}
	c, err := d.Dial("tcp", *addr)
	if err != nil {
		fmt.Printf("ERROR 0 %v\nSUMMARY ok=0 errors=1\n", err)
		return err
	}
	defer c.Close()
	r := bufio.NewReader(c)
	_ = c.SetDeadline(time.Now().Add(*timeout))
	greeting, err := r.ReadString('\n')
	if err != nil {
		fmt.Printf("ERROR 0 %v\nSUMMARY ok=0 errors=1\n", err)
		return err
	}
	fmt.Printf("CONNECTED %s\n", strings.TrimSpace(greeting))
	ok := 0
	for i := 1; !stop.Load(); i++ {
		_ = c.SetDeadline(time.Now().Add(*timeout))
		_, err := fmt.Fprintf(c, "ping-%d\n", i)
		var line string
		if err == nil {
			line, err = r.ReadString('\n')
		}
		if err != nil {
			fmt.Printf("ERROR %d %v\nSUMMARY ok=%d errors=1\n", i, err, ok)
			return err
		}
		ok++
		fmt.Printf("OK %d %s\n", i, strings.TrimSpace(line))
		time.Sleep(*interval)
	}
	fmt.Printf("SUMMARY ok=%d errors=0\n", ok)
	return nil
}

type lbBackend struct {
	addr, health string
	healthy      atomic.Bool
	code         atomic.Int64
}

// runLB is a load balancer in front of node ports: every --check-interval it
// asks each backend's health URL (a healthCheckNodePort), and every
// --interval it connects to the next backend whose last answer was 200.
// Lines: "HEALTH <addr> <code>" on every change, "OK <addr> <answer>",
// "ERROR <addr> <reason>", "NONE" when no backend is healthy, each ending
// with " at=<unix ms>"; SIGTERM ends it with "SUMMARY ok=N errors=N none=N".
func runLB(args []string) error {
	fs := flag.NewFlagSet("lb", flag.ContinueOnError)
	backends := fs.String("backends", "", "comma-separated NODEIP:NODEPORT=http://NODEIP:HEALTHPORT/")
	interval := fs.Duration("interval", 50*time.Millisecond, "pause between connections")
	check := fs.Duration("check-interval", 300*time.Millisecond, "pause between health checks")
	timeout := fs.Duration("timeout", 2*time.Second, "connection timeout")
	checkTimeout := fs.Duration("check-timeout", time.Second, "health check timeout")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var bs []*lbBackend
	for _, b := range strings.Split(*backends, ",") {
		addr, health, ok := strings.Cut(b, "=")
		if !ok {
			return fmt.Errorf("--backends: %q is not ADDR=HEALTHURL", b)
		}
		bs = append(bs, &lbBackend{addr: addr, health: health})
	}
	if len(bs) == 0 {
		return errors.New("lb: --backends is required")
	}
	stop := stopSignal()
	var mu sync.Mutex                         // one writer of stdout at a time
	say := func(format string, args ...any) { // every line ends with at=<unix ms>
		mu.Lock()
		fmt.Printf(strings.TrimSuffix(format, "\n")+" at=%d\n", append(args, time.Now().UnixMilli())...)
		mu.Unlock()
	}
	client := &http.Client{Timeout: *checkTimeout}
	for _, b := range bs {
		go func() {
			for !stop.Load() {
				code := int64(0)
				if resp, err := client.Get(b.health); err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					code = int64(resp.StatusCode)
				}
				if old := b.code.Swap(code); old != code {
					say("HEALTH %s %d\n", b.addr, code)
				}
				b.healthy.Store(code == http.StatusOK)
				time.Sleep(*check)
			}
		}()
	}
	ok, failed, none := 0, 0, 0
	next := 0
	for !stop.Load() {
		var pick *lbBackend
		for i := 0; i < len(bs); i++ {
			b := bs[(next+i)%len(bs)]
			if b.healthy.Load() {
				pick = b
				next = (next + i + 1) % len(bs)
				break
			}
		}
		if pick == nil {
			none++
			say("NONE\n")
		} else if line, err := attempt("tcp", pick.addr, *timeout); err != nil {
			failed++
			say("ERROR %s %v\n", pick.addr, err)
		} else {
			ok++
			say("OK %s %s\n", pick.addr, line)
		}
		time.Sleep(*interval)
	}
	say("SUMMARY ok=%d errors=%d none=%d\n", ok, failed, none)
	return nil
}
