package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"strings"
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
	errc := make(chan error, 2)
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
func runClient(args []string) error {
	fs := flag.NewFlagSet("client", flag.ContinueOnError)
	proto := fs.String("proto", "tcp", "tcp or udp")
	addr := fs.String("addr", "", "VIP:PORT to connect to")
	count := fs.Int("count", 1, "number of connections")
	timeout := fs.Duration("timeout", 2*time.Second, "per-attempt timeout")
	interval := fs.Duration("interval", 0, "pause between attempts")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *addr == "" {
		return errors.New("client: --addr is required")
	}
	failed := 0
	for i := 0; i < *count; i++ {
		line, err := attempt(*proto, *addr, *timeout)
		if err != nil {
			failed++
			fmt.Printf("ERROR %v\n", err)
		} else {
			fmt.Println(line)
		}
		if *interval > 0 {
			time.Sleep(*interval)
		}
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d attempts to %s/%s failed", failed, *count, *addr, *proto)
	}
	return nil
}

func attempt(proto, addr string, timeout time.Duration) (string, error) {
	c, err := net.DialTimeout(proto, addr, timeout)
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
