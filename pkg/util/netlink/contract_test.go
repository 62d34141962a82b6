package netlink

// Test addresses: 10.96.0.0/16 and fd00:96::/64 are service addresses bound to the
// device under test; 192.0.2.1 and 2001:db8::1 belong to the "other" link.

import (
	"context"
	"net"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/ipfamily"
)

func ipStrings(ips []net.IP) []string {
	out := make([]string, 0, len(ips))
	for _, ip := range ips {
		out = append(out, ip.String())
	}
	return out
}

// checkAddressContract runs the same address scenario against the Fake and the
// real rtnetlink Client, so the Fake cannot drift from the kernel. dev must exist
// and hold no addresses; other must hold exactly 192.0.2.1 and 2001:db8::1; lo
// holds 127.0.0.1 and ::1.
func checkAddressContract(t *testing.T, h Handle, dev string) {
	t.Helper()
	ctx := context.Background()
	v4, v6 := net.ParseIP("10.96.0.1"), net.ParseIP("fd00:96::1")

	for _, ip := range []net.IP{v4, v6, net.ParseIP("10.96.0.10")} {
		if was, err := h.EnsureAddressBind(ctx, ip, dev); err != nil || was {
			t.Fatalf("first EnsureAddressBind(%s) = %v, %v; want false, nil", ip, was, err)
		}
	}
	if was, err := h.EnsureAddressBind(ctx, v4, dev); err != nil || !was {
		t.Fatalf("second EnsureAddressBind(%s) = %v, %v; want true, nil", v4, was, err)
	}
	got, err := h.ListBindAddress(ctx, dev, ipfamily.Any)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"10.96.0.1", "10.96.0.10", "fd00:96::1"}, ipStrings(got)); diff != "" {
		t.Errorf("ListBindAddress (-want +got):\n%s", diff)
	}
	for af, want := range map[ipfamily.Family][]string{ipfamily.IPv4: {"10.96.0.1", "10.96.0.10"}, ipfamily.IPv6: {"fd00:96::1"}} {
		one, err := h.ListBindAddress(ctx, dev, af)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, ipStrings(one)); diff != "" {
			t.Errorf("ListBindAddress of family %d (-want +got):\n%s", af, diff)
		}
	}
	for _, ip := range got {
		if ip.To4() != nil && len(ip) != net.IPv4len {
			t.Errorf("IPv4 address %s not in 4-byte form", ip)
		}
	}

	local, err := h.GetLocalAddresses(ctx, dev)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"192.0.2.1", "2001:db8::1"}, ipStrings(local)); diff != "" {
		t.Errorf("GetLocalAddresses(except %s) (-want +got):\n%s", dev, diff)
	}
	all, err := h.GetLocalAddresses(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"10.96.0.1", "10.96.0.10", "192.0.2.1", "2001:db8::1", "fd00:96::1"}, ipStrings(all)); diff != "" {
		t.Errorf("GetLocalAddresses(all) (-want +got):\n%s", diff)
	}

	for range 2 { // unbinding an unbound address is not an error
		if err := h.UnbindAddress(ctx, v4, dev); err != nil {
			t.Fatalf("UnbindAddress(%s): %v", v4, err)
		}
	}
	if err := h.UnbindAddress(ctx, v6, dev); err != nil {
		t.Fatalf("UnbindAddress(%s): %v", v6, err)
	}
	got, err = h.ListBindAddress(ctx, dev, ipfamily.Any)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"10.96.0.10"}, ipStrings(got)); diff != "" {
		t.Errorf("ListBindAddress after unbind (-want +got):\n%s", diff)
	}
	if err := h.UnbindAddress(ctx, net.ParseIP("10.96.0.10"), dev); err != nil {
		t.Fatal(err)
	}

	const missing = "kpv-missing0"
	if _, err := h.EnsureAddressBind(ctx, v4, missing); !IsNotFound(err) {
		t.Errorf("EnsureAddressBind on a missing link = %v, want IsNotFound", err)
	}
	if err := h.UnbindAddress(ctx, v4, missing); !IsNotFound(err) {
		t.Errorf("UnbindAddress on a missing link = %v, want IsNotFound", err)
	}
	if _, err := h.ListBindAddress(ctx, missing, ipfamily.Any); !IsNotFound(err) {
		t.Errorf("ListBindAddress on a missing link = %v, want IsNotFound", err)
	}
	if _, err := h.GetLocalAddresses(ctx, missing); err != nil {
		t.Errorf("GetLocalAddresses excluding a missing link = %v, want nil", err)
	}
	if _, err := h.EnsureAddressBind(ctx, net.IP{1, 2, 3}, dev); err == nil || IsNotFound(err) {
		t.Errorf("EnsureAddressBind(invalid IP) = %v, want a non-not-found error", err)
	}
	if err := h.DeleteDummyDevice(ctx, missing); err != nil {
		t.Errorf("DeleteDummyDevice of a missing link = %v, want nil", err)
	}
}

// checkDummyContract checks creating and deleting the dummy device.
func checkDummyContract(t *testing.T, h Handle) {
	t.Helper()
	ctx := context.Background()
	const dev = DefaultDummyDevice
	if existed, err := h.EnsureDummyDevice(ctx, dev); err != nil || existed {
		t.Fatalf("first EnsureDummyDevice = %v, %v; want false, nil", existed, err)
	}
	if existed, err := h.EnsureDummyDevice(ctx, dev); err != nil || !existed {
		t.Fatalf("second EnsureDummyDevice = %v, %v; want true, nil", existed, err)
	}
	got, err := h.ListBindAddress(ctx, dev, ipfamily.Any)
	if err != nil || len(got) != 0 {
		t.Errorf("fresh dummy device holds %v (err %v), want nothing", got, err)
	}
	if _, err := h.EnsureAddressBind(ctx, net.ParseIP("10.96.0.1"), dev); err != nil {
		t.Fatal(err)
	}
	if err := h.DeleteDummyDevice(ctx, dev); err != nil {
		t.Fatal(err)
	}
	if _, err := h.ListBindAddress(ctx, dev, ipfamily.Any); !IsNotFound(err) {
		t.Errorf("ListBindAddress after DeleteDummyDevice = %v, want IsNotFound", err)
	}
	if err := h.DeleteDummyDevice(ctx, dev); err != nil {
		t.Errorf("second DeleteDummyDevice = %v, want nil", err)
	}
}

// checkBindAddressesContract: binding many addresses at once gives each the answer
// EnsureAddressBind gives: bound, already bound (nil), refused (ff02::1, a multicast
// address, on a device that is not lo), and on a missing link every one IsNotFound.
// dev must exist and hold no addresses.
func checkBindAddressesContract(t *testing.T, h Handle, dev string) {
	t.Helper()
	ctx := context.Background()
	var ips []net.IP
	for i := 1; i <= 300; i++ { // more than one chunk
		ips = append(ips, net.IPv4(10, 96, byte(i>>8), byte(i)))
	}
	ips = append(ips, net.ParseIP("fd00:96::20"), net.ParseIP("ff02::1"), net.ParseIP("10.96.0.1"))
	errs := h.BindAddresses(ctx, ips, dev)
	for i, err := range errs {
		switch refused := ips[i].String() == "ff02::1"; {
		case refused && err == nil:
			t.Errorf("BindAddresses: %s bound, want it refused", ips[i])
		case !refused && err != nil:
			t.Errorf("BindAddresses: %s: %v", ips[i], err)
		}
	}
	got, err := h.ListBindAddress(ctx, dev, ipfamily.Any)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 301 {
		t.Errorf("ListBindAddress after BindAddresses: %d addresses, want 301", len(got))
	}
	for _, ip := range got {
		if err := h.UnbindAddress(ctx, ip, dev); err != nil {
			t.Fatal(err)
		}
	}
	for i, err := range h.BindAddresses(ctx, ips[:2], "kpv-missing0") {
		if !IsNotFound(err) {
			t.Errorf("BindAddresses(%s) on a missing link = %v, want IsNotFound", ips[i], err)
		}
	}
}
