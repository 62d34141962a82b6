package main

import (
	"bufio"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Host-side checks of the two-node roles, on 127.0.0.1 only.

func startServe(t *testing.T, name string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	go func() { _ = runServe([]string{"--name", name, "--host", "127.0.0.1", "--port", itoa(port)}) }()
	addr := net.JoinHostPort("127.0.0.1", itoa(port))
	for i := 0; i < 100; i++ {
		if _, err := attempt("tcp", addr, time.Second); err == nil {
			return addr
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("server %s not answering on %s", name, addr)
	return ""
}

func TestServeEchoesALongConnection(t *testing.T) {
	addr := startServe(t, "pod-e")
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	r := bufio.NewReader(c)
	if l, _ := r.ReadString('\n'); !strings.HasPrefix(l, "pod-e from=127.0.0.1:") {
		t.Fatalf("greeting %q", l)
	}
	for i := 0; i < 3; i++ {
		fmt.Fprintf(c, "ping-%d\n", i)
		if l, _ := r.ReadString('\n'); l != fmt.Sprintf("pod-e echo=ping-%d\n", i) {
			t.Fatalf("echo %d = %q", i, l)
		}
	}
}

func TestClientSourceAddressAndPort(t *testing.T) {
	addr := startServe(t, "pod-s")
	line, err := attemptFrom("tcp", "127.0.0.7", addr, time.Second)
	if err != nil || !strings.HasPrefix(line, "pod-s from=127.0.0.7:") {
		t.Fatalf("tcp from 127.0.0.7: %q %v", line, err)
	}
	// UDP from a fixed port, twice in a row: the same source port each time.
	pc, _ := net.ListenPacket("udp", "127.0.0.1:0")
	port := pc.LocalAddr().(*net.UDPAddr).Port
	pc.Close()
	src := fmt.Sprintf("127.0.0.1:%d", port)
	for i := 0; i < 2; i++ {
		line, err := attemptFrom("udp", src, addr, time.Second)
		if err != nil || line != "pod-s from="+src {
			t.Fatalf("udp attempt %d from %s: %q %v", i, src, line, err)
		}
	}
	if _, err := localAddr("tcp", "not-an-ip"); err == nil {
		t.Fatal("--source not-an-ip must be refused")
	}
}

func TestRelayCarriesConnections(t *testing.T) {
	addr := startServe(t, "pod-r")
	sock := filepath.Join(t.TempDir(), "relay.sock")
	go func() { _ = runRelay([]string{"--listen", "unix:" + sock, "--to", "tcp:" + addr}) }()
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	front := ln.Addr().String()
	ln.Close()
	go func() { _ = runRelay([]string{"--listen", "tcp:" + front, "--to", "unix:" + sock}) }()
	var line string
	var err error
	for i := 0; i < 100; i++ {
		if line, err = attempt("tcp", front, time.Second); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil || !strings.HasPrefix(line, "pod-r from=") {
		t.Fatalf("through two relays: %q %v", line, err)
	}
	if _, _, err := splitEndpoint("udp:1.2.3.4:5"); err == nil {
		t.Fatal("udp endpoints must be refused")
	}
}
