package main

// e2e-agent ipvs-order --vs TCP/10.96.0.1:80
//
// Prints the real servers of one virtual server as "IP:PORT WEIGHT" lines in the
// order of the kernel's list (a destination dump over netlink walks it; ipvsadm -Ln
// prints another order, and /proc/net/ip_vs was cut after its first page): the order
// the sh and mh schedulers build their tables in.

import (
	"context"
	"flag"
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/ipvs"
)

func runIPVSOrder(args []string) error {
	fs := flag.NewFlagSet("ipvs-order", flag.ContinueOnError)
	vsFlag := fs.String("vs", "", "PROTO/IP:PORT")
	if err := fs.Parse(args); err != nil {
		return err
	}
	proto, hostport, ok := strings.Cut(*vsFlag, "/")
	host, port, err := net.SplitHostPort(hostport)
	if !ok || err != nil || net.ParseIP(host) == nil {
		return fmt.Errorf("ipvs-order: --vs %q: want PROTO/IP:PORT", *vsFlag)
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return fmt.Errorf("ipvs-order: --vs %q: bad port", *vsFlag)
	}
	c, err := ipvs.New("")
	if err != nil {
		return err
	}
	rss, err := c.GetRealServers(context.Background(), &ipvs.VirtualServer{Address: net.ParseIP(host), Protocol: proto, Port: uint16(p)})
	if err != nil {
		return err
	}
	for _, rs := range rss {
		fmt.Printf("%s %d\n", rs.Key(), rs.Weight)
	}
	return nil
}
