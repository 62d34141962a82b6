//go:build e2e

// Package e2e runs kube-proxy-ipvs end to end: a real kube-apiserver and etcd
// on 127.0.0.1, a qemu VM with Debian's kernel (IPVS, ipset, iptables) as the
// node, pods as network namespaces on a bridge in the VM, and our kube-proxy
// binary run in the VM as in production. Run with test/e2e/run.sh (make e2e).
//
// Addresses: pods 10.244.0.0/24 on cbr0 (gateway 10.244.0.1), Services
// 10.96.0.0/16 (allocated by the apiserver), node 10.0.2.15 (eth0, qemu user
// network with restrict=on, no default route), the apiserver at 10.0.2.100:6443
// and the agent control channel at 10.0.2.101:7000 (qemu guestfwd).
package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/test/e2e/framework"
)

var (
	repoRoot string
	// binaryNote says which binary runs as our daemon and whether the tree is newer.
	binaryNote string
	cp         *framework.ControlPlane
	vm         *framework.VM
	node       *framework.Node

	proxyOnce sync.Once
	proxyErr  error
	// vmOpts boots vm, and boots it again in rebootVM.
	vmOpts framework.VMOptions
)

func logf(format string, args ...any) {
	fmt.Printf("%s e2e: %s\n", time.Now().UTC().Format("15:04:05"), fmt.Sprintf(format, args...))
}

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	if os.Geteuid() != 0 {
		fmt.Println("e2e: FAIL: the end-to-end suite must run as root (qemu, namespaces in the VM)")
		return 1
	}
	if err := framework.CheckRulesBackend(); err != nil {
		fmt.Println("e2e: FAIL:", err)
		return 1
	}
	logf("our daemon's rules backend in this run: %s (KPI_E2E_RULES_BACKEND)", framework.RulesBackend())
	ctx := context.Background()
	var err error
	if repoRoot, err = framework.RepoRoot(); err != nil {
		fmt.Println("e2e: FAIL:", err)
		return 1
	}
	bin := os.Getenv("KPI_KUBE_PROXY")
	if bin == "" {
		bin = filepath.Join(repoRoot, "bin/kube-proxy")
	}
	if _, err := os.Stat(bin); err != nil {
		fmt.Printf("e2e: FAIL: %s missing: run `make build` (CGO_ENABLED=0) first\n", bin)
		return 1
	}
	if newer, err := framework.NewerSource(repoRoot, bin); err != nil {
		fmt.Println("e2e: FAIL: comparing the binary with the sources:", err)
		return 1
	} else if newer != "" {
		binaryNote = fmt.Sprintf("%s, OLDER THAN %s: not the code in this tree", bin, newer)
		logf("WARNING: %s is older than %s: the daemon under test is not the code in this tree (run `make build`)", bin, newer)
	} else {
		binaryNote = bin + ", newer than every source file of the daemon"
	}
	start := time.Now()
	cp, err = framework.StartControlPlane(ctx, repoRoot, logf)
	if err != nil {
		fmt.Println("e2e: FAIL: control plane:", err)
		return 1
	}
	defer cp.Stop()
	if err := framework.CreateNode(ctx, cp.Client); err != nil {
		fmt.Println("e2e: FAIL:", err)
		return 1
	}
	files := map[string]string{"/kpi/bin/kube-proxy": bin}
	extra, err := upstreamVMFiles() // upstream kube-proxy, for the migration scenarios and the scale run
	if err != nil {
		fmt.Println("e2e: FAIL:", err)
		return 1
	}
	for dst, src := range extra {
		files[dst] = src
	}
	mem := 0 // the framework's default
	if v := os.Getenv("KPI_VM_MEM"); v != "" {
		if mem, err = strconv.Atoi(v); err != nil || mem < 256 {
			fmt.Printf("e2e: FAIL: KPI_VM_MEM=%q: want MiB (at least 256)\n", v)
			return 1
		}
	}
	// The daemon runs from the image's root filesystem (the Dockerfile's
	// runtime stage) unless KPI_E2E_IMAGE_ROOTFS=0.
	var image *framework.Image
	if framework.ImageEnabled() {
		if image, err = framework.PrepareImage(ctx, repoRoot, bin); err != nil {
			fmt.Println("e2e: FAIL: image root filesystem:", err)
			return 1
		}
	}
	vmOpts = framework.VMOptions{
		APIServerPort: cp.Port,
		Files:         files,
		MemoryMiB:     mem,
		Image:         image,
	}
	vm, err = framework.BootVM(ctx, repoRoot, vmOpts, logf)
	if err != nil {
		fmt.Println("e2e: FAIL: VM:", err)
		return 1
	}
	defer func() { vm.Stop() }() // the VM of the end: rebootVM may replace it
	if node, err = framework.SetupNode(ctx, vm); err != nil {
		fmt.Println("e2e: FAIL:", err)
		return 1
	}
	logf("testbed ready in %s", time.Since(start).Round(time.Second))
	code := m.Run()
	if node.KubeProxyRunning(ctx) {
		if err := node.StopKubeProxy(ctx); err != nil {
			logf("stopping kube-proxy: %v", err)
		}
	}
	return code
}

// requireKubeProxy starts our kube-proxy in the VM once, for every scenario
// that needs it, and fails the calling test loudly when it cannot run.
func requireKubeProxy(t *testing.T) {
	t.Helper()
	proxyOnce.Do(func() {
		ctx := context.Background()
		if err := node.StartKubeProxy(ctx, cp, framework.KubeProxyConfig("")); err != nil {
			proxyErr = err
			return
		}
		proxyErr = node.WaitKubeProxyReady(ctx, 90*time.Second)
	})
	if proxyErr != nil {
		t.Fatalf("FAIL LOUDLY: our kube-proxy is not running in the VM, so this scenario cannot run: %v", proxyErr)
	}
	if !node.KubeProxyRunning(context.Background()) {
		t.Fatalf("kube-proxy died during the suite; log tail:\n%s", node.KubeProxyLog(context.Background(), 40))
	}
}

// defaultBackendOnly fails a scenario that runs with the default rules backend
// only (test/e2e/run.sh lists them and why) when this run gives the daemon
// another: its checks would not hold.
func defaultBackendOnly(t *testing.T) {
	t.Helper()
	if framework.NFTablesPass() {
		t.Fatalf("FAIL LOUDLY: %s runs with the default rules backend only (see test/e2e/run.sh), not with KPI_E2E_RULES_BACKEND=%s", t.Name(), framework.RulesBackend())
	}
}

// dumpOnFailure prints kernel state and the kube-proxy log when t failed.
func dumpOnFailure(t *testing.T) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		ctx := context.Background()
		t.Logf("kernel state in the VM:\n%s", node.KernelState(ctx))
		if node.KubeProxyRunning(ctx) || proxyErr == nil {
			t.Logf("kube-proxy log tail:\n%s", node.KubeProxyLog(ctx, 30))
		}
		if os.Getenv("KPI_E2E_GOROUTINES_ON_FAILURE") == "1" && node.KubeProxyRunning(ctx) {
			// Debugging a stall: SIGQUIT makes the daemon print every goroutine and
			// exit (the scenarios after this one then fail loudly).
			out, _ := vm.Sh(ctx, "kill -QUIT $(pidof kube-proxy); sleep 3; awk 'BEGIN{RS=\"\"} /kube-proxy-ipvs\\/(pkg|cmd)/' "+node.ProxyLogPath+" | grep -v '^\\s*/usr/local/go' | head -600")
			t.Logf("kube-proxy goroutines:\n%s", out)
		}
	})
}

// guest runs a script in the VM and fails t on error.
func guest(t *testing.T, ctx context.Context, script string) string {
	t.Helper()
	out, err := vm.Sh(ctx, script)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// addPods creates pods prefix-a, prefix-b... at 10.244.0.<first+i>.
func addPods(t *testing.T, ctx context.Context, prefix string, first, n int) []*framework.Pod {
	t.Helper()
	return addPodsOf(t, ctx, prefix, first, n, false)
}

// addPodsOf is addPods; dual pods also get fd00:244::<first+i>.
func addPodsOf(t *testing.T, ctx context.Context, prefix string, first, n int, dual bool) []*framework.Pod {
	t.Helper()
	var pods []*framework.Pod
	for i := 0; i < n; i++ {
		var ip6 []string
		if dual {
			ip6 = append(ip6, fmt.Sprintf("fd00:244::%d", first+i))
		}
		p, err := node.AddPod(ctx, fmt.Sprintf("%s-%c", prefix, 'a'+i), fmt.Sprintf("10.244.0.%d", first+i), ip6...)
		if err != nil {
			t.Fatal(err)
		}
		pods = append(pods, p)
	}
	t.Cleanup(func() {
		for _, p := range pods {
			if err := node.DeletePod(context.Background(), p); err != nil {
				t.Errorf("deleting pod %s: %v", p.Name, err)
			}
		}
	})
	return pods
}

func endpoints(pods []*framework.Pod) []framework.Endpoint {
	var eps []framework.Endpoint
	for _, p := range pods {
		eps = append(eps, framework.Endpoint{PodName: p.Name, IP: p.IP})
	}
	return eps
}

// waitRealServers waits until IPVS holds exactly want (sorted) for vip.
func waitRealServers(t *testing.T, ctx context.Context, proto, vip string, want []string) {
	t.Helper()
	err := framework.Eventually(ctx, 60*time.Second, time.Second, func(ctx context.Context) error {
		got, err := node.RealServers(ctx, proto, vip)
		if err != nil {
			return err
		}
		if strings.Join(got, ",") != strings.Join(want, ",") {
			return fmt.Errorf("IPVS %s %s has real servers %q, want %q", proto, vip, got, want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// expectAnswers connects count times and checks every pod answered exactly
// want[name] times.
func expectAnswers(t *testing.T, ctx context.Context, ns, proto, addr string, count int, want map[string]int) {
	t.Helper()
	out, err := node.ClientFrom(ctx, ns, proto, addr, count)
	if err != nil {
		t.Fatal(err)
	}
	got, errs := framework.CountAnswers(out)
	t.Logf("%d %s connections to %s answered by %v", count, proto, addr, got)
	if errs != 0 || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("answers from %s/%s = %v with %d errors, want %v; client output:\n%s", addr, proto, got, errs, want, out)
	}
}
