//go:build e2e && e2escale

package e2e

import (
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// KPI_SCALE_PROFILE=SECONDS takes a CPU profile of each kube-proxy's first
// SECONDS: the daemon runs with enableProfiling, a wget in the VM asks its
// metrics port for /debug/pprof/profile as soon as it answers, and the profile
// is kept as cpu-NAME.pprof in KPI_SCALE_LOG_DIR (required with it). The
// profile costs the daemon a little CPU (100 samples a second); a run that
// measures is a run without it.

// scaleProfileSecs is KPI_SCALE_PROFILE of the run (0: none).
var scaleProfileSecs int

// scaleProfileSeconds reads KPI_SCALE_PROFILE (0: no profile).
func scaleProfileSeconds(t *testing.T) int {
	v := os.Getenv("KPI_SCALE_PROFILE")
	if v == "" {
		return 0
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > 600 {
		t.Fatalf("KPI_SCALE_PROFILE=%q: want the seconds to profile, 1-600", v)
	}
	if os.Getenv("KPI_SCALE_LOG_DIR") == "" {
		t.Fatal("KPI_SCALE_PROFILE needs KPI_SCALE_LOG_DIR: the profiles are kept there")
	}
	return n
}

// scaleProfiling is one daemon's profile being taken.
type scaleProfiling struct {
	name, path string
	pid        int
}

// scaleStartProfile asks the daemon for a profile of its first seconds; the
// config must have enableProfiling (scaleProfileConfig). The wget is retried
// every 50 ms until the metrics server answers, for up to 30 s.
func scaleStartProfile(ctx context.Context, name string, seconds int) (*scaleProfiling, error) {
	path := "/tmp/scale-cpu-" + name + ".pprof"
	script := fmt.Sprintf(`rm -f %[1]s
for i in $(seq 600); do
  wget -q -O %[1]s 'http://127.0.0.1:10249/debug/pprof/profile?seconds=%[2]d' && exit 0
  sleep 0.05
done
echo "the metrics port never answered" >&2
exit 1`, path, seconds)
	pid, err := vm.Start(ctx, "/tmp/scale-cpu-"+name+".log", "sh", "-c", script)
	if err != nil {
		return nil, fmt.Errorf("starting the profile's wget in the VM: %w", err)
	}
	return &scaleProfiling{name: name, path: path, pid: pid}, nil
}

// scaleProfileConfig is config with the profiling endpoints on.
func scaleProfileConfig(config string) string {
	return config + "enableProfiling: true\n"
}

// keep waits for the wget to end (the profile's length from the daemon's
// start, at most) and copies the profile into KPI_SCALE_LOG_DIR.
func (p *scaleProfiling) keep(ctx context.Context, seconds int) error {
	ctx, cancel := context.WithTimeout(ctx, time.Duration(seconds)*time.Second+2*time.Minute)
	defer cancel()
	script := fmt.Sprintf(`while test -d /proc/%[1]d && ! grep -q '^State:.*Z' /proc/%[1]d/status; do sleep 1; done
test -s %[2]s || { echo "no profile:" >&2; cat /tmp/scale-cpu-%[3]s.log >&2; exit 1; }
base64 -w0 %[2]s`, p.pid, p.path, p.name)
	out, err := vm.Sh(ctx, script)
	if err != nil {
		return fmt.Errorf("reading %s's profile: %w", p.name, err)
	}
	data, err := base64.StdEncoding.DecodeString(strings.TrimSpace(out))
	if err != nil {
		return fmt.Errorf("decoding %s's profile: %w", p.name, err)
	}
	dir := os.Getenv("KPI_SCALE_LOG_DIR")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	file := filepath.Join(dir, "cpu-"+p.name+".pprof")
	if err := os.WriteFile(file, data, 0o644); err != nil {
		return err
	}
	logf("[%s] CPU profile of the first %d s: %s (%d bytes; go tool pprof -top %s)", p.name, seconds, file, len(data), file)
	return nil
}
