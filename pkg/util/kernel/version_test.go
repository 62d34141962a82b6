package kernel

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseVersion(t *testing.T) {
	tests := []struct {
		in   string
		want Version
		err  bool
	}{
		{in: "6.1.0-57-amd64", want: Version{6, 1, 0}},
		{in: "6.18.44-fc-v1045\n", want: Version{6, 18, 44}},
		{in: "5.15.0-1034-azure", want: Version{5, 15, 0}},
		{in: "3.10.0-1160.el7.x86_64", want: Version{3, 10, 0}},
		{in: "4.19.260", want: Version{4, 19, 260}},
		{in: "6.8.0-rc1", want: Version{6, 8, 0}},
		{in: "6.9-rc3", want: Version{6, 9, 0}},
		{in: "5.10", want: Version{5, 10, 0}},
		{in: "4.1.", want: Version{4, 1, 0}},
		{in: "2.6.32.71", want: Version{2, 6, 32}},
		{in: "", err: true},
		{in: "abc", err: true},
		{in: "6", err: true},
		{in: "6..1", err: true},
		{in: "-5.4", err: true},
		{in: "99999999999999999999.1", err: true},
	}
	for _, tc := range tests {
		got, err := ParseVersion(tc.in)
		if (err != nil) != tc.err {
			t.Errorf("ParseVersion(%q) error = %v, want error %v", tc.in, err, tc.err)
			continue
		}
		if got != tc.want {
			t.Errorf("ParseVersion(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

func TestConnReuseWindow(t *testing.T) {
	for s, want := range map[string]bool{
		"3.10.0": false, "4.0.9": false, "4.1.0": true, "4.19.0": true,
		"5.8.18": true, "5.9.0": false, "5.10.0": false, "6.1.0": false,
	} {
		v, err := ParseVersion(s)
		if err != nil {
			t.Fatal(err)
		}
		if got := SetConnReuseModeZero(v); got != want {
			t.Errorf("SetConnReuseModeZero(%s) = %v, want %v", s, got, want)
		}
	}
}

func TestCompare(t *testing.T) {
	a, b := Version{5, 9, 0}, Version{5, 10, 0}
	if !a.LessThan(b) || a.AtLeast(b) || !b.AtLeast(a) || a.Compare(a) != 0 || b.Compare(a) != 1 {
		t.Errorf("comparisons of %v and %v wrong", a, b)
	}
	if a.String() != "5.9.0" {
		t.Errorf("String = %q", a.String())
	}
}

func TestReadVersion(t *testing.T) {
	root := t.TempDir()
	if _, err := ReadVersion(root); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("ReadVersion without the file = %v, want ErrNotExist", err)
	}
	if err := os.MkdirAll(filepath.Join(root, "kernel"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "kernel", "osrelease"), []byte("5.4.0-150-generic\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	v, err := ReadVersion(root)
	if err != nil || v != (Version{5, 4, 0}) {
		t.Errorf("ReadVersion = %v, %v", v, err)
	}
	// The running kernel must parse too.
	v, err = ReadVersion(DefaultRoot)
	if err != nil {
		t.Fatalf("ReadVersion(%s): %v", DefaultRoot, err)
	}
	raw, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	if !strings.HasPrefix(string(raw), fmt.Sprintf("%d.%d.", v.Major, v.Minor)) {
		t.Errorf("running kernel %q parsed as %v", raw, v)
	}
}

func FuzzParseVersion(f *testing.F) {
	for _, s := range []string{"6.1.0-57-amd64", "5.10", "3.10.0-1160.el7.x86_64", "", "1.2.3.4.5"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ParseVersion(s)
		if err != nil {
			return
		}
		if v.Major < 0 || v.Minor < 0 || v.Patch < 0 {
			t.Fatalf("ParseVersion(%q) = %v: negative component", s, v)
		}
		// The canonical form parses back to the same version.
		back, err := ParseVersion(v.String())
		if err != nil || back != v {
			t.Fatalf("ParseVersion(%q) = %v, but %q parses as %v, %v", s, v, v.String(), back, err)
		}
	})
}
