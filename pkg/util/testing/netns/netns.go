// Package netns runs a test inside a fresh, private network and mount namespace so
// that it can program iptables, ipsets, links and routes without touching the host.
//
// Usage, at the top of a root-only test:
//
//	func TestIntegrationSomething(t *testing.T) {
//		netns.Run(t, func(t *testing.T) {
//			// runs in a private netns with lo up, a private /run and /sys
//		})
//	}
//
// Outside a private namespace, Run re-executes the test binary for just this test
// in a new network and mount namespace (clone flags CLONE_NEWNET|CLONE_NEWNS on the
// child, so no unshare(1) is needed, e.g. in the test VM's initramfs), streams the
// child's output into the test log and fails when the child fails. The body only ever runs in the
// child: there is no code path on which it runs in the caller's namespace.
//
// Inside the child, Run first checks that the network and mount namespaces really
// differ from the parent's (the parent passes its namespace identities in the
// environment), makes every mount private, mounts a tmpfs on /run (so
// /run/xtables.lock and /run/netns are private) and a sysfs on /sys (so
// /sys/class/net shows this namespace's links), and brings lo up.
package netns

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

const (
	// envTest names the test the child process was started for.
	envTest = "KUBE_PROXY_IPVS_NETNS_TEST"
	// envParentNet and envParentMnt carry the parent's namespace identities so the
	// child can prove it is somewhere else before touching anything.
	envParentNet = "KUBE_PROXY_IPVS_NETNS_PARENT_NET"
	envParentMnt = "KUBE_PROXY_IPVS_NETNS_PARENT_MNT"
)

// Run runs body inside a fresh network namespace. It skips (loudly) when not root,
// and fails when root but the namespace cannot be created.
func Run(t *testing.T, body func(t *testing.T)) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skipf("SKIPPING %s: this real-kernel test needs root to create a private network namespace (run hack/integration.sh as root)", t.Name())
	}
	if want := os.Getenv(envTest); want != "" {
		if want != t.Name() && !strings.HasPrefix(t.Name(), want+"/") {
			t.Fatalf("netns child started for %q is running %q: refusing to run outside its namespace", want, t.Name())
		}
		if err := enterChild(); err != nil {
			t.Fatalf("preparing private namespace: %v", err)
		}
		body(t)
		return
	}
	runChild(t, []string{"-test.run", runPattern(t.Name()), "-test.bench", "^$"}, true)
}

// RunBenchmark runs body inside a fresh network namespace. Outside one, it runs the
// benchmark in a child process (once, whatever b.N the caller was started with),
// copies the child's output, including the benchmark result line, to stdout and then
// skips in the parent with a message that points at the child's result.
func RunBenchmark(b *testing.B, body func(b *testing.B)) {
	b.Helper()
	if os.Geteuid() != 0 {
		b.Skipf("SKIPPING %s: this real-kernel benchmark needs root to create a private network namespace", b.Name())
	}
	if want := os.Getenv(envTest); want != "" {
		if want != b.Name() && !strings.HasPrefix(b.Name(), want+"/") {
			b.Fatalf("netns child started for %q is running %q", want, b.Name())
		}
		if err := enterChild(); err != nil {
			b.Fatalf("preparing private namespace: %v", err)
		}
		body(b)
		return
	}
	args := []string{"-test.run", "^$", "-test.bench", runPattern(b.Name())}
	for _, name := range []string{"test.benchtime", "test.benchmem", "test.cpu"} {
		if f := flag.Lookup(name); f != nil && f.Value.String() != f.DefValue {
			args = append(args, "-"+name+"="+f.Value.String())
		}
	}
	runChild(b, args, false)
	b.Skipf("%s ran in a private network namespace; its result is printed above", b.Name())
}

// InPrivateNamespace reports whether this process is a child started by Run or
// RunBenchmark and its network namespace differs from the parent's. (PID 1's
// namespace is not a usable reference: in containers /proc/1 may be unreadable.)
func InPrivateNamespace() (bool, error) {
	parent := os.Getenv(envParentNet)
	if parent == "" {
		return false, nil
	}
	self, err := nsID("/proc/self/ns/net")
	if err != nil {
		return false, err
	}
	return self != parent, nil
}

// runPattern turns a (sub)test name into an anchored -test.run pattern that selects
// exactly that test: each slash-separated level is matched literally.
func runPattern(name string) string {
	parts := strings.Split(name, "/")
	for i, p := range parts {
		parts[i] = "^" + regexp.QuoteMeta(p) + "$"
	}
	return strings.Join(parts, "/")
}

// runChild re-executes the test binary in new namespaces. For a test, output goes
// to the test log and the child's "--- PASS/SKIP" verdict for this test is
// required; for a benchmark, output goes to stdout (where go test prints results).
func runChild(tb testing.TB, args []string, isTest bool) {
	tb.Helper()
	parentNet, err := nsID("/proc/self/ns/net")
	if err != nil {
		tb.Fatalf("reading own network namespace: %v", err)
	}
	parentMnt, err := nsID("/proc/self/ns/mnt")
	if err != nil {
		tb.Fatalf("reading own mount namespace: %v", err)
	}
	self, err := os.Executable()
	if err != nil {
		tb.Fatalf("finding the test binary: %v", err)
	}
	args = append(args, "-test.v=true", "-test.count=1")
	for _, name := range []string{"test.timeout", "test.short", "test.failfast"} {
		if f := flag.Lookup(name); f != nil && f.Value.String() != f.DefValue {
			args = append(args, "-"+name+"="+f.Value.String())
		}
	}
	cmd := exec.Command(self, args...)
	// Only the child is created in the new namespaces; this process stays put.
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: unix.CLONE_NEWNET | unix.CLONE_NEWNS}
	cmd.Env = append(os.Environ(),
		envTest+"="+tb.Name(),
		envParentNet+"="+parentNet,
		envParentMnt+"="+parentMnt,
	)
	out, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatalf("piping child output: %v", err)
	}
	cmd.Stderr = cmd.Stdout // the same pipe: keep the child's lines in order
	if err := cmd.Start(); err != nil {
		tb.Fatalf("starting %s in new namespaces: %v", tb.Name(), err)
	}
	var verdict, skipReason string
	var lastLines []string
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 64*1024), 4*1024*1024)
	for sc.Scan() {
		line := sc.Text()
		if !isTest {
			fmt.Println(line)
		} else {
			tb.Log("[netns] " + line)
		}
		trimmed := strings.TrimSpace(line)
		for _, v := range []string{"PASS", "FAIL", "SKIP"} {
			if strings.HasPrefix(trimmed, "--- "+v+": "+tb.Name()+" ") {
				verdict = v
			}
		}
		if verdict == "SKIP" && skipReason == "" && len(lastLines) > 0 {
			skipReason = lastLines[len(lastLines)-1]
		}
		lastLines = append(lastLines, trimmed)
		if len(lastLines) > 5 {
			lastLines = lastLines[1:]
		}
	}
	scanErr := sc.Err()
	waitErr := cmd.Wait()
	if scanErr != nil {
		tb.Fatalf("reading child output: %v", scanErr)
	}
	var exitErr *exec.ExitError
	switch {
	case waitErr != nil && errors.As(waitErr, &exitErr):
		tb.Fatalf("%s failed in its private network namespace (exit status %d)", tb.Name(), exitErr.ExitCode())
	case waitErr != nil:
		tb.Fatalf("running %s in a private network namespace: %v", tb.Name(), waitErr)
	}
	if !isTest {
		return
	}
	switch verdict {
	case "PASS":
	case "SKIP":
		tb.Skipf("child skipped %s: %s", tb.Name(), skipReason)
	default:
		tb.Fatalf("child process did not report a result for %s (pattern matched no test?)", tb.Name())
	}
}

var (
	childOnce sync.Once
	childErr  error
)

// enterChild verifies isolation and prepares the private namespace, once per process.
func enterChild() error {
	childOnce.Do(func() { childErr = prepareChild() })
	return childErr
}

func prepareChild() error {
	for _, c := range []struct{ path, env string }{
		{"/proc/self/ns/net", envParentNet},
		{"/proc/self/ns/mnt", envParentMnt},
	} {
		id, err := nsID(c.path)
		if err != nil {
			return err
		}
		parent := os.Getenv(c.env)
		if parent == "" || parent == id {
			return fmt.Errorf("%s is %s, the same as the parent's (%q): not a private namespace", c.path, id, parent)
		}
	}
	// A new mount namespace starts with the parent's propagation: shared mounts
	// would carry the mounts below back to the host, so make everything private
	// before mounting anything.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("making mounts private: %w", err)
	}
	// A minimal initramfs (the test VM) may have no /run.
	if err := os.MkdirAll("/run", 0o755); err != nil {
		return fmt.Errorf("creating /run: %w", err)
	}
	if err := unix.Mount("tmpfs", "/run", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755"); err != nil {
		return fmt.Errorf("mounting a private tmpfs on /run: %w", err)
	}
	if err := unix.Mount("sysfs", "/sys", "sysfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mounting this namespace's sysfs on /sys: %w", err)
	}
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		return fmt.Errorf("finding lo: %w", err)
	}
	if err := netlink.LinkSetUp(lo); err != nil {
		return fmt.Errorf("bringing lo up: %w", err)
	}
	return nil
}

// nsID reads a namespace identity such as "net:[4026531840]".
func nsID(path string) (string, error) {
	id, err := os.Readlink(path)
	if err != nil {
		return "", fmt.Errorf("reading namespace link %s: %w", path, err)
	}
	return id, nil
}

// RefusedUDP sends one datagram to a closed port of addr and reports whether the
// kernel's ICMP port unreachable came back (the socket reads ECONNREFUSED).
func RefusedUDP(t *testing.T, addr string) bool {
	t.Helper()
	c, err := net.Dial("udp", net.JoinHostPort(addr, "9"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	_, err = c.Read(make([]byte, 1))
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return true
	case errors.Is(err, syscall.EAGAIN) || isTimeout(err):
		return false
	}
	t.Fatalf("reading from %s: %v", addr, err)
	return false
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
