// Command e2e-demo is what `make demo` runs (through test/e2e/demo.sh): it
// starts a real kube-apiserver + etcd on 127.0.0.1, boots the IPVS VM as a
// node, runs our kube-proxy in it, creates a Service with three pods, prints
// `ipvsadm -Ln`, fetches the ClusterIP several times printing which pod
// answered, and shuts everything down.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/test/e2e/framework"
)

func say(format string, args ...any) {
	fmt.Printf("[demo] %s %s\n", time.Now().UTC().Format("15:04:05"), fmt.Sprintf(format, args...))
}

func main() {
	kubeProxy := flag.String("kube-proxy", "bin/kube-proxy", "kube-proxy binary to run in the VM (static)")
	fetches := flag.Int("fetches", 6, "how many times to fetch the ClusterIP")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *kubeProxy, *fetches); err != nil {
		say("FAILED: %v", err)
		os.Exit(1)
	}
	say("done")
}

func run(ctx context.Context, kubeProxy string, fetches int) error {
	root, err := framework.RepoRoot()
	if err != nil {
		return err
	}
	if !filepath.IsAbs(kubeProxy) {
		kubeProxy = filepath.Join(root, kubeProxy)
	}
	if _, err := os.Stat(kubeProxy); err != nil {
		return fmt.Errorf("%s missing: run `make build`", kubeProxy)
	}

	say("starting etcd and kube-apiserver on 127.0.0.1")
	cp, err := framework.StartControlPlane(ctx, root, say)
	if err != nil {
		return err
	}
	defer func() { say("stopping the control plane"); cp.Stop() }()
	if err := framework.CreateNode(ctx, cp.Client); err != nil {
		return err
	}

	say("booting the VM (Debian kernel with IPVS) as node %s (%s)", framework.NodeName, framework.NodeIP)
	vm, err := framework.BootVM(ctx, root, framework.VMOptions{
		APIServerPort: cp.Port,
		Files:         map[string]string{"/kpi/bin/kube-proxy": kubeProxy},
	}, say)
	if err != nil {
		return err
	}
	defer func() { say("powering the VM off"); vm.Stop() }()
	node, err := framework.SetupNode(ctx, vm)
	if err != nil {
		return err
	}

	eps, err := addPods(ctx, node)
	if err != nil {
		return err
	}

	say("starting our kube-proxy in the VM (--config mode: ipvs, --kubeconfig https://%s)", framework.VMAPIServerAddress)
	if err := node.StartKubeProxy(ctx, cp, framework.KubeProxyConfig("")); err != nil {
		return err
	}
	defer func() {
		say("stopping kube-proxy")
		if err := node.StopKubeProxy(context.Background()); err != nil {
			say("stopping kube-proxy: %v", err)
		}
	}()
	if err := node.WaitKubeProxyReady(ctx, 90*time.Second); err != nil {
		return fmt.Errorf("kube-proxy did not come up: %w", err)
	}
	say("kube-proxy is running")

	return showService(ctx, cp, vm, node, eps, fetches)
}

// addPods starts the three pods behind the demo Service and returns them as its
// endpoints.
func addPods(ctx context.Context, node *framework.Node) ([]framework.Endpoint, error) {
	var eps []framework.Endpoint
	for i, name := range []string{"pod-a", "pod-b", "pod-c"} {
		p, err := node.AddPod(ctx, name, fmt.Sprintf("10.244.0.%d", 10+i))
		if err != nil {
			return nil, err
		}
		eps = append(eps, framework.Endpoint{PodName: p.Name, IP: p.IP})
		say("pod %s at %s answering on :8080", p.Name, p.IP)
	}
	return eps, nil
}

// showService creates Service demo/web over eps, waits until IPVS has a real
// server per endpoint, prints ipvsadm -Ln and fetches the ClusterIP fetches
// times: every pod must answer.
func showService(ctx context.Context, cp *framework.ControlPlane, vm *framework.VM, node *framework.Node, eps []framework.Endpoint, fetches int) error {
	if err := framework.CreateNamespace(ctx, cp.Client, "demo"); err != nil {
		return err
	}
	svc, err := framework.CreateService(ctx, cp.Client, "demo", "web", corev1.ServiceTypeClusterIP,
		framework.ServicePort{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80})
	if err != nil {
		return err
	}
	if _, err := framework.CreateEndpointSlice(ctx, cp.Client, svc, eps...); err != nil {
		return err
	}
	vip := svc.Spec.ClusterIP + ":80"
	say("Service demo/web has ClusterIP %s with 3 endpoints", vip)
	err = framework.Eventually(ctx, 60*time.Second, time.Second, func(ctx context.Context) error {
		rs, err := node.RealServers(ctx, "TCP", vip)
		if err != nil {
			return err
		}
		if len(rs) != len(eps) {
			return fmt.Errorf("IPVS has %d real servers for %s, want %d", len(rs), vip, len(eps))
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("%w\nkube-proxy log tail:\n%s", err, node.KubeProxyLog(ctx, 30))
	}
	out, err := vm.Sh(ctx, "ipvsadm -Ln")
	if err != nil {
		return err
	}
	say("ipvsadm -Ln in the VM:\n%s", out)

	out, err = node.Client(ctx, "tcp", vip, fetches)
	if err != nil {
		return err
	}
	for i, line := range strings.Split(out, "\n") {
		say("fetch %d of %s -> %s", i+1, vip, line)
	}
	counts, errs := framework.CountAnswers(out)
	if errs != 0 || len(counts) != len(eps) {
		return fmt.Errorf("expected every pod to answer and no error, got %v and %d errors", counts, errs)
	}
	say("every pod answered: %v", counts)
	return nil
}
