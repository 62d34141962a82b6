package netlink

import (
	"context"
	"errors"
	"net"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func newContractFake() *Fake {
	f := NewFake()
	f.AddLink("lo", "127.0.0.1", "::1")
	f.AddLink("other", "192.0.2.1", "2001:db8::1", "fe80::1")
	f.AddLink("dev0")
	return f
}

func TestFakeAddressContract(t *testing.T) {
	checkAddressContract(t, newContractFake(), "dev0")
}

func TestFakeDummyContract(t *testing.T) {
	checkDummyContract(t, newContractFake())
}

func TestFakeDumpOpsInjection(t *testing.T) {
	ctx := context.Background()
	f := newContractFake()
	if _, err := f.EnsureDummyDevice(ctx, DefaultDummyDevice); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"fd00:96::1", "10.96.0.10", "10.96.0.2"} {
		if _, err := f.EnsureAddressBind(ctx, net.ParseIP(s), DefaultDummyDevice); err != nil {
			t.Fatal(err)
		}
	}
	want := "dev0:\n" +
		"kube-ipvs0 (dummy): 10.96.0.2 10.96.0.10 fd00:96::1\n" +
		"lo: 127.0.0.1 ::1\n" +
		"other: 192.0.2.1 2001:db8::1 fe80::1\n"
	if diff := cmp.Diff(want, f.Dump()); diff != "" {
		t.Errorf("Dump (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]int{OpEnsureDummy: 1, OpBind: 3}, f.Ops()); diff != "" {
		t.Errorf("Ops (-want +got):\n%s", diff)
	}
	f.ResetOps()
	boom := errors.New("boom")
	f.InjectError(OpUnbind, boom)
	if err := f.UnbindAddress(ctx, net.ParseIP("10.96.0.2"), DefaultDummyDevice); !errors.Is(err, boom) {
		t.Errorf("injected error = %v", err)
	}
	if diff := cmp.Diff(want, f.Dump()); diff != "" {
		t.Errorf("failed call changed state (-want +got):\n%s", diff)
	}
	f.InjectError(OpUnbind, nil)
	if err := f.UnbindAddress(ctx, net.ParseIP("10.96.0.2"), DefaultDummyDevice); err != nil {
		t.Fatal(err)
	}
	if f.Ops()[OpUnbind] != 2 {
		t.Errorf("Ops = %v", f.Ops())
	}
}

func TestFakeBindAddressesContract(t *testing.T) {
	checkBindAddressesContract(t, newContractFake(), "dev0")
}
