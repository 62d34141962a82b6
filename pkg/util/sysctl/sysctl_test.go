package sysctl

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/testing/netns"
)

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// checkContract runs against both implementations: net/ipv4/vs/conntrack exists
// and holds 0, net/ipv4/vs/missing does not exist.
func checkContract(t *testing.T, s Interface) {
	t.Helper()
	if v, err := s.GetSysctl("net/ipv4/vs/conntrack"); err != nil || v != 0 {
		t.Fatalf("GetSysctl = %d, %v; want 0, nil", v, err)
	}
	if err := s.SetSysctl("net/ipv4/vs/conntrack", 1); err != nil {
		t.Fatal(err)
	}
	if v, err := s.GetSysctl("net/ipv4/vs/conntrack"); err != nil || v != 1 {
		t.Fatalf("GetSysctl after set = %d, %v; want 1, nil", v, err)
	}
	if _, err := s.GetSysctl("net/ipv4/vs/missing"); !IsNotFound(err) {
		t.Errorf("GetSysctl(missing) = %v, want IsNotFound", err)
	}
	if err := s.SetSysctl("net/ipv4/vs/missing", 1); !IsNotFound(err) {
		t.Errorf("SetSysctl(missing) = %v, want IsNotFound", err)
	}
}

func TestProcfsContract(t *testing.T) {
	root := t.TempDir()
	writeFile(t, filepath.Join(root, "net/ipv4/vs/conntrack"), "0\n")
	checkContract(t, NewAt(root))
	data, err := os.ReadFile(filepath.Join(root, "net/ipv4/vs/conntrack"))
	if err != nil || string(data) != "1\n" {
		t.Errorf("file holds %q (%v), want \"1\\n\"", data, err)
	}
}

func TestFakeContract(t *testing.T) {
	f := NewFake(map[string]int{"net/ipv4/vs/conntrack": 0, "net/ipv4/ip_forward": 1})
	checkContract(t, f)
	if diff := cmp.Diff("net/ipv4/ip_forward = 1\nnet/ipv4/vs/conntrack = 1\n", f.Dump()); diff != "" {
		t.Errorf("Dump (-want +got):\n%s", diff)
	}
	if f.Writes() != 1 {
		t.Errorf("Writes = %d, want 1", f.Writes())
	}
}

func TestProcfsRejectsBadNamesAndValues(t *testing.T) {
	root := t.TempDir()
	writeFile(t, filepath.Join(root, "kernel/garbage"), "abc\n")
	writeFile(t, filepath.Join(filepath.Dir(root), "outside"), "1\n")
	s := NewAt(root)
	for _, name := range []string{"", "/etc/passwd", "../outside", "net//x", "net/./x"} {
		if _, err := s.GetSysctl(name); err == nil {
			t.Errorf("GetSysctl(%q) succeeded", name)
		}
		if err := s.SetSysctl(name, 1); err == nil {
			t.Errorf("SetSysctl(%q) succeeded", name)
		}
	}
	if _, err := s.GetSysctl("kernel/garbage"); err == nil || IsNotFound(err) {
		t.Errorf("GetSysctl(non-integer) = %v, want a parse error", err)
	}
}

// TestIntegrationProcSys writes a real network sysctl in a private namespace and
// checks that the kernel's rejection of a bad value comes back as an error.
func TestIntegrationProcSys(t *testing.T) {
	netns.Run(t, func(t *testing.T) {
		s := New()
		const name = "net/ipv4/conf/lo/arp_ignore"
		if err := s.SetSysctl(name, 1); err != nil {
			t.Fatal(err)
		}
		if v, err := s.GetSysctl(name); err != nil || v != 1 {
			t.Fatalf("GetSysctl = %d, %v; want 1", v, err)
		}
		if err := s.SetSysctl(name, 0); err != nil {
			t.Fatal(err)
		}
		// ip_default_ttl is range-checked (1-255): the kernel rejects 999 with EINVAL.
		if err := s.SetSysctl("net/ipv4/ip_default_ttl", 999); !errors.Is(err, syscall.EINVAL) {
			t.Errorf("SetSysctl(ip_default_ttl=999) = %v, want EINVAL", err)
		}
		if v, err := s.GetSysctl("kernel/osrelease"); err == nil {
			t.Errorf("GetSysctl(kernel/osrelease) = %d, want a parse error", v)
		}
	})
}

func TestEnsure(t *testing.T) {
	f := NewFake(map[string]int{"net/ipv4/vs/conntrack": 1, "net/ipv4/vs/expire_nodest_conn": 0})
	if changed, err := Ensure(f, "net/ipv4/vs/conntrack", 1); err != nil || changed {
		t.Errorf("Ensure(already 1) = %v, %v; want false, nil", changed, err)
	}
	if changed, err := Ensure(f, "net/ipv4/vs/expire_nodest_conn", 1); err != nil || !changed {
		t.Errorf("Ensure(0 -> 1) = %v, %v; want true, nil", changed, err)
	}
	if _, err := Ensure(f, "net/ipv4/vs/missing", 1); !IsNotFound(err) {
		t.Errorf("Ensure(missing) = %v, want IsNotFound", err)
	}
	if f.Writes() != 1 {
		t.Errorf("Writes = %d, want 1", f.Writes())
	}
	// A read-only file that already holds the value is fine.
	root := t.TempDir()
	path := filepath.Join(root, "net/ipv4/ip_forward")
	writeFile(t, path, "1\n")
	if err := os.Chmod(path, 0o444); err != nil {
		t.Fatal(err)
	}
	if changed, err := Ensure(NewAt(root), "net/ipv4/ip_forward", 1); err != nil || changed {
		t.Errorf("Ensure on a read-only file holding the value = %v, %v", changed, err)
	}
}

func TestFakeNilMeansEverySysctlExists(t *testing.T) {
	f := NewFake(nil)
	if v, err := f.GetSysctl("net/ipv4/vs/conntrack"); err != nil || v != 0 {
		t.Errorf("GetSysctl on NewFake(nil) = %d, %v; want 0, nil", v, err)
	}
	if err := f.SetSysctl("net/ipv4/vs/conntrack", 1); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff("net/ipv4/vs/conntrack = 1\n", f.Dump()); diff != "" {
		t.Errorf("Dump (-want +got):\n%s", diff)
	}
	// An empty, non-nil map is strict: nothing exists.
	if _, err := NewFake(map[string]int{}).GetSysctl("net/ipv4/vs/conntrack"); !IsNotFound(err) {
		t.Errorf("GetSysctl on NewFake(empty) = %v, want IsNotFound", err)
	}
}
