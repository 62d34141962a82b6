package netlink

// Test addresses: every address here is the value under test; dev holds
// nothing before and after.

import (
	"context"
	"errors"
	"net"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/ipfamily"
)

// bindKind classifies an EnsureAddressBind error by errno.
func bindKind(err error) string {
	switch {
	case err == nil:
		return "ok"
	case IsAddressNotAvailable(err):
		return "addrnotavail"
	case errors.Is(err, unix.EINVAL):
		return "einval"
	case IsNotFound(err):
		return "notfound"
	}
	return "other: " + err.Error()
}

// bindRefusals are the binds the kernel refuses or accepts on a device that
// is not the loopback device, whatever its type and state.
var bindRefusals = []struct {
	ip, want string
}{
	// ipv6_add_addr: multicast anywhere, loopback outside lo: EADDRNOTAVAIL.
	{"ff02::1", "addrnotavail"},
	{"ff05::2", "addrnotavail"},
	{"::1", "addrnotavail"},
	{"::", "addrnotavail"},
	{"fe80::1", "ok"},
	{"::10.1.0.1", "ok"},
	{"2001:db8::7", "ok"},
	// IPv4 has no address-type check on bind.
	{"224.0.0.1", "ok"},
	{"255.255.255.255", "ok"},
	{"0.0.0.0", "ok"},
	{"127.0.0.2", "ok"},
	{"169.254.1.1", "ok"},
}

// checkBindRefusalContract binds each address to dev (not lo), which must exist
// and hold no addresses, and unbinds what was accepted. Unbinding a refused
// address is not an error (it is not bound).
func checkBindRefusalContract(t *testing.T, h Handle, dev string) {
	t.Helper()
	ctx := context.Background()
	for _, c := range bindRefusals {
		ip := net.ParseIP(c.ip)
		_, err := h.EnsureAddressBind(ctx, ip, dev)
		if got := bindKind(err); got != c.want {
			t.Errorf("EnsureAddressBind(%s, %s): got %s, want %s", c.ip, dev, got, c.want)
		}
		if err := h.UnbindAddress(ctx, ip, dev); err != nil {
			t.Errorf("UnbindAddress(%s, %s): %v", c.ip, dev, err)
		}
	}
	got, err := h.ListBindAddress(ctx, dev, ipfamily.Any)
	if err != nil || len(got) != 0 {
		t.Errorf("%s after the refusals holds %v (err %v), want nothing", dev, got, err)
	}
}

func TestFakeBindRefusalContract(t *testing.T) {
	checkBindRefusalContract(t, newContractFake(), "dev0")
}
