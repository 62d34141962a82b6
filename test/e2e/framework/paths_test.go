package framework

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestNewerSource: a daemon source file changed after the binary was built is named;
// test files and files outside cmd/ and pkg/ are not.
func TestNewerSource(t *testing.T) {
	root := t.TempDir()
	write := func(rel string, at time.Time) string {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("package x\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, at, at); err != nil {
			t.Fatal(err)
		}
		return p
	}
	base := time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC)
	write("pkg/a/a.go", base)
	write("cmd/kube-proxy/main.go", base)
	bin := write("bin/kube-proxy", base.Add(time.Minute))
	write("pkg/a/a_test.go", base.Add(time.Hour))
	write("test/e2e/x.go", base.Add(time.Hour))
	if got, err := NewerSource(root, bin); err != nil || got != "" {
		t.Fatalf("binary newer than the sources: %q, %v; want none", got, err)
	}
	newer := write("pkg/a/b.go", base.Add(2*time.Minute))
	if got, err := NewerSource(root, bin); err != nil || got != newer {
		t.Fatalf("a source changed after the build: %q, %v; want %s", got, err, newer)
	}
	if _, err := NewerSource(root, filepath.Join(root, "bin/missing")); err == nil {
		t.Error("a missing binary: no error")
	}
}
