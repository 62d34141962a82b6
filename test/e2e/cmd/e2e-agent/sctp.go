package main

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"strconv"
	"syscall"
	"time"
)

// SCTP with one-to-one (SOCK_STREAM) sockets over raw syscalls: the Go
// standard library has no SCTP, and this is all a test pod needs.

const ipprotoSCTP = 132

func retryEINTR(f func() error) error {
	for {
		if err := f(); !errors.Is(err, syscall.EINTR) {
			return err
		}
	}
}

func sctpSockaddr(host string, port int) (*syscall.SockaddrInet4, error) {
	sa := &syscall.SockaddrInet4{Port: port}
	if host != "" {
		ip := net.ParseIP(host).To4()
		if ip == nil {
			return nil, fmt.Errorf("sctp: %q is not an IPv4 address", host)
		}
		copy(sa.Addr[:], ip)
	}
	return sa, nil
}

// listenSCTP returns a listening SCTP socket on host:port.
func listenSCTP(host string, port int) (int, error) {
	sa, err := sctpSockaddr(host, port)
	if err != nil {
		return -1, err
	}
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, ipprotoSCTP)
	if err != nil {
		return -1, fmt.Errorf("sctp socket (is the sctp module loaded?): %w", err)
	}
	if err := syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1); err != nil {
		syscall.Close(fd)
		return -1, err
	}
	if err := syscall.Bind(fd, sa); err != nil {
		syscall.Close(fd)
		return -1, fmt.Errorf("sctp bind %s:%d: %w", host, port, err)
	}
	if err := syscall.Listen(fd, 128); err != nil {
		syscall.Close(fd)
		return -1, err
	}
	return fd, nil
}

// serveSCTP answers every association on fd with one line, as for TCP.
func serveSCTP(fd int, name string) error {
	for {
		var nfd int
		var from syscall.Sockaddr
		err := retryEINTR(func() (err error) {
			nfd, from, err = syscall.Accept4(fd, syscall.SOCK_CLOEXEC)
			return err
		})
		if err != nil {
			return fmt.Errorf("sctp accept: %w", err)
		}
		go func() {
			defer syscall.Close(nfd)
			line := []byte(fmt.Sprintf("%s from=%s\n", name, sockaddrString(from)))
			_ = retryEINTR(func() error { _, err := syscall.Write(nfd, line); return err })
			// Let the peer read before the association is shut down.
			time.Sleep(50 * time.Millisecond)
		}()
	}
}

func sockaddrString(sa syscall.Sockaddr) string {
	if in4, ok := sa.(*syscall.SockaddrInet4); ok {
		return net.JoinHostPort(net.IP(in4.Addr[:]).String(), strconv.Itoa(in4.Port))
	}
	return fmt.Sprintf("%v", sa)
}

// attemptSCTP opens one association to addr and reads one line.
func attemptSCTP(addr string, timeout time.Duration) (string, error) {
	host, portText, err := net.SplitHostPort(addr)
	if err != nil {
		return "", err
	}
	port, err := strconv.Atoi(portText)
	if err != nil {
		return "", fmt.Errorf("sctp: bad port in %q", addr)
	}
	sa, err := sctpSockaddr(host, port)
	if err != nil {
		return "", err
	}
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, ipprotoSCTP)
	if err != nil {
		return "", fmt.Errorf("sctp socket: %w", err)
	}
	defer syscall.Close(fd)
	// SCTP's blocking connect and recv honour the socket timeouts.
	tv := syscall.NsecToTimeval(timeout.Nanoseconds())
	_ = syscall.SetsockoptTimeval(fd, syscall.SOL_SOCKET, syscall.SO_SNDTIMEO, &tv)
	_ = syscall.SetsockoptTimeval(fd, syscall.SOL_SOCKET, syscall.SO_RCVTIMEO, &tv)
	if err := retryEINTR(func() error { return syscall.Connect(fd, sa) }); err != nil {
		return "", fmt.Errorf("sctp connect %s: %w", addr, err)
	}
	var got []byte
	buf := make([]byte, 512)
	for !bytes.Contains(got, []byte("\n")) {
		var n int
		err := retryEINTR(func() (err error) { n, err = syscall.Read(fd, buf); return err })
		if err != nil {
			return "", fmt.Errorf("reading from %s/sctp: %w", addr, err)
		}
		if n == 0 {
			return "", fmt.Errorf("reading from %s/sctp: association closed after %q", addr, got)
		}
		got = append(got, buf[:n]...)
	}
	line, _, _ := bytes.Cut(got, []byte("\n"))
	return string(line), nil
}
