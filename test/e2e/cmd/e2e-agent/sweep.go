package main

// e2e-agent sweep --sources 192.168.200.101,... --targets 10.0.0.1:30080,...
//
// One TCP connection from every source address to every target, several sources at
// a time, each printing "SOURCE TARGET ANSWER" (or "SOURCE TARGET ERROR ..."): which
// pod each client reaches through each entry, for the consistent-hashing scenarios.
// --port sends from that source port (the hash then covers it, mh-port); every
// connection ends with a reset (SO_LINGER 0), so no TIME_WAIT blocks the same
// source address and port from being used again once IPVS forgot the connection.

import (
	"bufio"
	"flag"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"
)

func runSweep(args []string) error {
	fs := flag.NewFlagSet("sweep", flag.ContinueOnError)
	sources := fs.String("sources", "", "comma-separated source addresses")
	targets := fs.String("targets", "", "comma-separated HOST:PORT")
	port := fs.Int("port", 0, "source port (0: any)")
	parallel := fs.Int("parallel", 16, "sources at a time")
	timeout := fs.Duration("timeout", 3*time.Second, "per-connection timeout")
	if err := fs.Parse(args); err != nil {
		return err
	}
	srcs, tgts := splitList(*sources), splitList(*targets)
	if len(srcs) == 0 || len(tgts) == 0 || *parallel < 1 {
		return fmt.Errorf("sweep: --sources and --targets are required, --parallel at least 1")
	}
	lines := make([][]string, len(srcs))
	sem := make(chan struct{}, *parallel)
	var wg sync.WaitGroup
	for i, src := range srcs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			for _, tgt := range tgts {
				answer, err := sweepOne(src, *port, tgt, *timeout)
				if err != nil {
					answer = "ERROR " + err.Error()
				}
				lines[i] = append(lines[i], src+" "+tgt+" "+answer)
			}
		}()
	}
	wg.Wait()
	failed := 0
	for _, ls := range lines {
		for _, l := range ls {
			if strings.Contains(l, " ERROR ") {
				failed++
			}
			fmt.Println(l)
		}
	}
	if failed > 0 {
		return fmt.Errorf("%d connections failed", failed)
	}
	return nil
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// sweepOne connects from src(:port) to target and returns the first line the pod
// sends, closing with a reset.
func sweepOne(src string, port int, target string, timeout time.Duration) (string, error) {
	ip := net.ParseIP(src)
	if ip == nil {
		return "", fmt.Errorf("source %q: not an IP address", src)
	}
	d := net.Dialer{Timeout: timeout, LocalAddr: &net.TCPAddr{IP: ip, Port: port}}
	c, err := d.Dial("tcp", target)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.(*net.TCPConn).SetLinger(0)
	_ = c.SetDeadline(time.Now().Add(timeout))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("reading from %s: %w", target, err)
	}
	return strings.TrimSpace(line), nil
}
