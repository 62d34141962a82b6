package main

// What the scale benchmark reads beside IPVS (issue 31): the tables of
// upstream kube-proxy's nftables mode ("ip kube-proxy"), read over netlink,
// and the CPU time the measured daemon has used.

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	gnft "github.com/google/nftables"
	"github.com/google/nftables/expr"
)

// nftTableOf parses "ip/kube-proxy" (FAMILY/TABLE, family ip, ip6 or inet).
func nftTableOf(s string) (*gnft.Table, error) {
	fam, name, ok := strings.Cut(s, "/")
	if !ok || name == "" {
		return nil, fmt.Errorf("nftables table %q: want FAMILY/NAME", s)
	}
	t := &gnft.Table{Name: name}
	switch fam {
	case "ip":
		t.Family = gnft.TableFamilyIPv4
	case "ip6":
		t.Family = gnft.TableFamilyIPv6
	case "inet":
		t.Family = gnft.TableFamilyINet
	default:
		return nil, fmt.Errorf("nftables table %q: family %q is not ip, ip6 or inet", s, fam)
	}
	return t, nil
}

var nftConn *gnft.Conn

func nftConnection() (*gnft.Conn, error) {
	if nftConn != nil {
		return nftConn, nil
	}
	c, err := gnft.New(gnft.AsLasting())
	if err != nil {
		return nil, err
	}
	nftConn = c
	return c, nil
}

// nftTableSetMembers is the element count of set or map name of table
// ("ip/kube-proxy"), -1 when it cannot be read (not there yet).
func nftTableSetMembers(table, name string) int {
	t, err := nftTableOf(table)
	if err != nil {
		return -1
	}
	c, err := nftConnection()
	if err != nil {
		return -1
	}
	s, err := c.GetSetByName(t, name)
	if err != nil {
		return -1
	}
	elems, err := c.GetSetElements(s)
	if err != nil {
		return -1
	}
	n := 0
	for _, e := range elems {
		if !e.IntervalEnd {
			n++
		}
	}
	return n
}

// nftChainExists reports whether "FAMILY/TABLE/CHAIN" is in the kernel.
func nftChainExists(key string) (bool, error) {
	fam, rest, _ := strings.Cut(key, "/")
	table, chain, ok := strings.Cut(rest, "/")
	if !ok {
		return false, fmt.Errorf("nftables chain %q: want FAMILY/TABLE/CHAIN", key)
	}
	t, err := nftTableOf(fam + "/" + table)
	if err != nil {
		return false, err
	}
	c, err := nftConnection()
	if err != nil {
		return false, err
	}
	_, err = c.ListChain(t, chain)
	return err == nil, nil
}

// cpuTicks returns utime, stime, cutime and cstime (clock ticks, 100 a second
// on Linux) of the process whose executable is exe; ok false if none runs.
func cpuTicks(exe string) (t [4]int64, pid int, ok bool) {
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		if l, err := os.Readlink(d + "/exe"); err != nil || l != exe {
			continue
		}
		var ok bool
		if t, ok = statTicks(d + "/stat"); !ok {
			continue
		}
		pid, _ = strconv.Atoi(filepath.Base(d))
		return t, pid, true
	}
	return t, 0, false
}

// printCPU prints "cpu PID UTIME STIME CUTIME CSTIME" (ticks) of exe's process,
// "self UTIME STIME CUTIME CSTIME" of this poller (its ipset and iptables-save
// children included) and "vm USER NICE SYSTEM IDLE IOWAIT IRQ SOFTIRQ STEAL":
// the VM's CPU time (ticks, all vCPUs) since the poller started (vmStart).
func printCPU(exe string) {
	if exe == "" {
		return
	}
	if t, pid, ok := cpuTicks(exe); ok {
		fmt.Printf("cpu %d %d %d %d %d\n", pid, t[0], t[1], t[2], t[3])
	}
	if t, ok := statTicks("/proc/self/stat"); ok {
		fmt.Printf("self %d %d %d %d\n", t[0], t[1], t[2], t[3])
	}
	if end, ok := vmTicks(); ok && vmStartOK {
		fmt.Print("vm")
		for i := range end {
			fmt.Printf(" %d", end[i]-vmStart[i])
		}
		fmt.Println()
	}
}

// vmStart is the VM's CPU time when the poller started.
var vmStart, vmStartOK = vmTicks()

// vmTicks is the first eight figures of /proc/stat's "cpu" line: user, nice,
// system, idle, iowait, irq, softirq, steal (ticks, summed over the vCPUs).
func vmTicks() (t [8]int64, ok bool) {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return t, false
	}
	line, _, _ := strings.Cut(string(data), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return t, false
	}
	for i := range t {
		t[i], _ = strconv.ParseInt(f[1+i], 10, 64)
	}
	return t, true
}

// statTicks is utime, stime, cutime and cstime of a /proc/PID/stat file.
func statTicks(path string) (t [4]int64, ok bool) {
	data, err := os.ReadFile(path)
	if err != nil {
		return t, false
	}
	// Fields after the command's closing parenthesis: state is field 3, utime 14.
	s := string(data)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 15 {
		return t, false
	}
	for i := range t {
		t[i], _ = strconv.ParseInt(f[11+i], 10, 64)
	}
	return t, true
}

// listChains prints "chain NAME" for every chain of table ("ip/kube-proxy")
// whose name starts with prefix.
func listChains(table, prefix string) error {
	t, err := nftTableOf(table)
	if err != nil {
		return err
	}
	c, err := nftConnection()
	if err != nil {
		return err
	}
	chains, err := c.ListChainsOfTableFamily(t.Family)
	if err != nil {
		return err
	}
	for _, ch := range chains {
		if ch.Table != nil && ch.Table.Name == t.Name && strings.HasPrefix(ch.Name, prefix) {
			fmt.Printf("chain %s\n", ch.Name)
		}
	}
	return nil
}

// nftChainDNATs returns the IPv4 destinations the rules of chain key
// (FAMILY/TABLE/CHAIN) DNAT to: upstream's nftables mode (v1.37) writes one
// rule per Service chain, "dnat to ADDR:PORT" for one endpoint (immediate
// data) or "dnat ip addr . port to numgen random mod N map { 0 : ADDR . PORT,
// ... }" (an anonymous map whose values start with the address).
func nftChainDNATs(key string) ([]string, error) {
	fam, rest, _ := strings.Cut(key, "/")
	table, chain, ok := strings.Cut(rest, "/")
	if !ok {
		return nil, fmt.Errorf("nftables chain %q: want FAMILY/TABLE/CHAIN", key)
	}
	t, err := nftTableOf(fam + "/" + table)
	if err != nil {
		return nil, err
	}
	c, err := nftConnection()
	if err != nil {
		return nil, err
	}
	rules, err := c.GetRules(t, &gnft.Chain{Name: chain, Table: t})
	if err != nil {
		return nil, nil // no chain (yet)
	}
	var out []string
	for _, r := range rules {
		for _, e := range r.Exprs {
			switch x := e.(type) {
			case *expr.Immediate:
				if len(x.Data) == 4 {
					out = append(out, net.IP(x.Data).String())
				}
			case *expr.Lookup:
				if !x.IsDestRegSet || x.SetName == "" {
					continue
				}
				s, err := c.GetSetByName(t, x.SetName)
				if err != nil {
					continue
				}
				elems, err := c.GetSetElements(s)
				if err != nil {
					continue
				}
				for _, el := range elems {
					if len(el.Val) >= 4 {
						out = append(out, net.IP(el.Val[:4]).String())
					}
				}
			}
		}
	}
	return out, nil
}

// runDNAT waits until chain key DNATs to ip (FAMILY/TABLE/CHAIN=IP).
func runDNAT(ready, arg string, interval, timeout time.Duration) error {
	key, ip, ok := strings.Cut(arg, "=")
	if !ok {
		return fmt.Errorf("-nft-dnat %q: want FAMILY/TABLE/CHAIN=IP", arg)
	}
	if _, err := nftChainDNATs(key); err != nil {
		return err
	}
	start := time.Now()
	if ready != "" {
		if err := os.WriteFile(ready, nil, 0o644); err != nil {
			return err
		}
	}
	for polls := 1; ; polls++ {
		ips, err := nftChainDNATs(key)
		if err != nil {
			return err
		}
		for _, got := range ips {
			if got == ip {
				fmt.Printf("polls %d %d\n", polls, time.Since(start).Milliseconds())
				return nil
			}
		}
		if time.Since(start) > timeout {
			return fmt.Errorf("timeout after %s and %d polls: chain %s DNATs to %v, not %s", timeout, polls, key, ips, ip)
		}
		time.Sleep(interval)
	}
}

// printDNATs prints "dnat CHAIN IP..." for each chain of table (-dnats).
func printDNATs(table string, chains []string) error {
	for _, ch := range chains {
		ips, err := nftChainDNATs(table + "/" + ch)
		if err != nil {
			return err
		}
		fmt.Printf("dnat %s %s\n", ch, strings.Join(ips, " "))
	}
	return nil
}
