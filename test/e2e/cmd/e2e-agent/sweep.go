package main

// e2e-agent sweep --sources 192.168.200.101,... --targets 10.0.0.1:30080,...
//
// One TCP connection from every source address to every target, several sources at
// a time, each printing "SOURCE TARGET ANSWER" (or "SOURCE TARGET ERROR ...", after
// "RETRY SOURCE TARGET ERROR ..." lines for the failed tries of --attempts): which
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
	attempts := fs.Int("attempts", 1, "tries per source and target")
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
				// A connection that fails is tried again (up to --attempts): which
				// pod answers is what is asked, and a VM stalled for seconds
				// under load loses one now and then. Every retry is printed.
				var answer string
				for a := 1; a <= *attempts; a++ {
					var err error
					if answer, err = sweepOne(src, *port, tgt, *timeout); err == nil {
						break
					}
					answer = "ERROR " + err.Error()
					if a < *attempts {
						lines[i] = append(lines[i], "RETRY "+src+" "+tgt+" "+answer)
					}
				}
				lines[i] = append(lines[i], src+" "+tgt+" "+answer)
			}
		}()
	}
	wg.Wait()
	failed := 0
	for _, ls := range lines {
		for _, l := range ls {
			if strings.Contains(l, " ERROR ") && !strings.HasPrefix(l, "RETRY ") {
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
