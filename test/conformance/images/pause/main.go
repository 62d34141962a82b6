// Command pause is the conformance cluster's pod sandbox process (the image
// registry.k8s.io/pause names): it holds the pod's namespaces open, reaps the
// children it inherits as PID 1 of a shared PID namespace, and exits 0 on
// SIGINT or SIGTERM. Built static here, so no registry is reached.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

// version is what -v prints; the image's tag follows upstream's pause.
const version = "kube-proxy-ipvs conformance pause"

func main() {
	if len(os.Args) > 1 && os.Args[1] == "-v" {
		fmt.Println(version)
		return
	}
	if os.Getpid() != 1 {
		fmt.Fprintln(os.Stderr, "Warning: pause should be the first process")
	}
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range sigs {
		if s != syscall.SIGCHLD {
			fmt.Fprintf(os.Stderr, "Shutting down, got signal: %v\n", s)
			os.Exit(0)
		}
		reap()
	}
}

// reap collects every exited child without blocking.
func reap() {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}
