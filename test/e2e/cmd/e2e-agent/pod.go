package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// runServe is the test pod: every TCP connection and every UDP datagram on
// --port gets one line "NAME from=CLIENT_IP:PORT", so tests see both which
// endpoint answered and which source address it saw (masquerade checks).
func runServe(args []string) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	name := fs.String("name", "", "name to answer with (default: hostname)")
	port := fs.Int("port", 8080, "TCP and UDP port")
	host := fs.String("host", "", "address to listen on (default: all of the pod's)")
	sctp := fs.Bool("sctp", false, "answer SCTP associations on the port too")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *name == "" {
		h, _ := os.Hostname()
		*name = h
	}
	addr := net.JoinHostPort(*host, fmt.Sprint(*port))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	pc, err := net.ListenPacket("udp", addr)
	if err != nil {
		return err
	}
	errc := make(chan error, 3)
	if *sctp {
		fd, err := listenSCTP(*host, *port)
		if err != nil {
			return err
		}
		go func() { errc <- serveSCTP(fd, *name) }()
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				errc <- err
				return
			}
			go func() {
				defer c.Close()
				fmt.Fprintf(c, "%s from=%s\n", *name, c.RemoteAddr())
				// A client that keeps the connection (e2e-agent hold) gets
				// every line it sends echoed back: a long-lived connection
				// whose endpoint can be drained under it. One-shot clients
				// close after the greeting, which ends this loop.
				echo(c, *name)
			}()
		}
	}()
	go func() {
		buf := make([]byte, 2048)
		for {
			_, from, err := pc.ReadFrom(buf)
			if err != nil {
				errc <- err
				return
			}
			_, _ = pc.WriteTo([]byte(fmt.Sprintf("%s from=%s\n", *name, from)), from)
		}
	}()
	return <-errc
}

// runClient connects --count times and prints one line per attempt: the
// server's answer, or "ERROR <reason>". It exits non-zero if any attempt failed.
// With --count 0 it runs until SIGTERM or SIGINT (a load generator) and ends
// with "SUMMARY ok=N errors=N".
func runClient(args []string) error {
	fs := flag.NewFlagSet("client", flag.ContinueOnError)
	proto := fs.String("proto", "tcp", "tcp, udp or sctp")
	addr := fs.String("addr", "", "VIP:PORT to connect to")
	count := fs.Int("count", 1, "number of connections (0: until SIGTERM)")
	timeout := fs.Duration("timeout", 2*time.Second, "per-attempt timeout")
	interval := fs.Duration("interval", 0, "pause between attempts")
	source := fs.String("source", "", "local address to send from: IP, or IP:PORT (UDP: every attempt from that same port, as a resolver does)")
	stamp := fs.Bool("stamp", false, "end every line with at=<unix milliseconds> (when the attempt ended)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *addr == "" {
		return errors.New("client: --addr is required")
	}
	var stop atomic.Bool
	if *count == 0 {
		sigs := make(chan os.Signal, 1)
		signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
		go func() { <-sigs; stop.Store(true) }()
	}
	failed, done := 0, 0
	for i := 0; (*count == 0 && !stop.Load()) || i < *count; i++ {
		done++
		line, err := attemptFrom(*proto, *source, *addr, *timeout)
		if err != nil {
			failed++
			line = fmt.Sprintf("ERROR %v", err)
		}
		if *stamp {
			line += fmt.Sprintf(" at=%d", time.Now().UnixMilli())
		}
		fmt.Println(line)
		if *interval > 0 {
			time.Sleep(*interval)
		}
	}
	if *count == 0 {
		fmt.Printf("SUMMARY ok=%d errors=%d\n", done-failed, failed)
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d attempts to %s/%s failed", failed, done, *addr, *proto)
	}
	return nil
}

func attempt(proto, addr string, timeout time.Duration) (string, error) {
	return attemptFrom(proto, "", addr, timeout)
}

// attemptFrom is attempt with an optional local address (see --source).
func attemptFrom(proto, source, addr string, timeout time.Duration) (string, error) {
	if proto == "sctp" {
		return attemptSCTP(addr, timeout)
	}
	d := net.Dialer{Timeout: timeout}
	if source != "" {
		local, err := localAddr(proto, source)
		if err != nil {
			return "", err
		}
		d.LocalAddr = local
	}
	c, err := d.Dial(proto, addr)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(timeout))
	if proto == "udp" {
		if _, err := c.Write([]byte("hello\n")); err != nil {
			return "", err
		}
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("reading from %s/%s: %w", addr, proto, err)
	}
	return strings.TrimSpace(line), nil
}
