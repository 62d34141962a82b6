// Command e2e-agent is the single static binary the end-to-end tests put in
// the VM. It has four roles:
//
//	e2e-agent agent --connect 10.0.2.101:7000
//	    control channel: dials the host and runs its requests (see agentproto);
//	e2e-agent serve --name pod-a --port 8080
//	    a test "pod": answers "NAME from=CLIENT" over TCP and UDP on the port;
//	e2e-agent client --proto tcp --addr 10.96.0.10:80 --count 6
//	    connects COUNT times and prints one answer (or ERROR line) per attempt
//	    (tcp, udp or sctp; --count 0: until SIGTERM, then a SUMMARY line);
//	e2e-agent get --url http://10.0.2.15:30001/
//	    prints "STATUS <code>" and the body (health check node ports);
//	e2e-agent relay|hold|lb ...
//	    the two-node testbed's roles (see twonode.go);
//	e2e-agent sweep --sources IP,... --targets HOST:PORT,...
//	    one connection from each source to each target (see sweep.go);
//	e2e-agent ipvs-order --vs TCP/IP:PORT
//	    a virtual server's real servers in the kernel's list order (ipvsorder.go).
package main

import (
	"fmt"
	"os"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: e2e-agent agent|serve|client|get|relay|hold|lb|sweep|ipvs-order [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "agent":
		err = runAgent(os.Args[2:])
	case "serve":
		err = runServe(os.Args[2:])
	case "client":
		err = runClient(os.Args[2:])
	case "get":
		err = runGet(os.Args[2:])
	case "relay":
		err = runRelay(os.Args[2:])
	case "hold":
		err = runHold(os.Args[2:])
	case "lb":
		err = runLB(os.Args[2:])
	case "sweep":
		err = runSweep(os.Args[2:])
	case "ipvs-order":
		err = runIPVSOrder(os.Args[2:])
	default:
		err = fmt.Errorf("unknown role %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e-agent:", err)
		os.Exit(1)
	}
}
