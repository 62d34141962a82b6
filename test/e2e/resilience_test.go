//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/test/e2e/framework"
)

// Resilience: endpoints replaced under load, the apiserver going away, and
// someone else changing kube-proxy's kernel state. Pod address blocks
// (10.244.0.X): 201-209 rolling update, 211-219 apiserver restart, 221-229
// tampering, 91-99 daemon restart (scenarios_test.go).

// load is an e2e-agent client in the VM connecting to one address in a loop
// until stopped.
type load struct {
	pid  int
	log  string
	addr string
	out  string // the generator's output, once stopped
}

// startLoad starts a load generator from pod namespace ns ("" = the node):
// one connection every interval, each with a 2 s timeout; extra are more
// e2e-agent client flags.
func startLoad(t *testing.T, ctx context.Context, ns, proto, addr string, interval time.Duration, extra ...string) *load {
	t.Helper()
	l := &load{log: fmt.Sprintf("/tmp/load-%d.log", time.Now().UnixNano()), addr: addr}
	argv := append([]string{"/kpi/bin/e2e-agent", "client", "--proto", proto, "--addr", addr, "--count", "0", "--timeout", "2s", "--interval", interval.String()}, extra...)
	if ns != "" {
		argv = append([]string{"ip", "netns", "exec", ns}, argv...)
	}
	pid, err := vm.Start(ctx, l.log, argv...)
	if err != nil {
		t.Fatal(err)
	}
	l.pid = pid
	t.Cleanup(func() { _ = vm.Signal(context.Background(), pid, syscall.SIGKILL) })
	return l
}

// stop ends the load and returns the answers per pod, the failed attempts and
// the error lines with their position in the run.
func (l *load) stop(t *testing.T, ctx context.Context) (map[string]int, int, []string) {
	t.Helper()
	if err := vm.Signal(ctx, l.pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	var out string
	err := framework.Eventually(ctx, 20*time.Second, 300*time.Millisecond, func(ctx context.Context) error {
		var err error
		if out, err = vm.Sh(ctx, "cat "+l.log); err != nil {
			return err
		}
		if !strings.Contains(out, "SUMMARY ") {
			return fmt.Errorf("load generator on %s has not finished", l.addr)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	l.out = out
	var errLines []string
	for i, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "ERROR") {
			errLines = append(errLines, fmt.Sprintf("#%d %s", i, line))
		}
	}
	got, errs := framework.CountAnswers(out)
	t.Logf("load on %s: answers %v, %d failed", l.addr, got, errs)
	return got, errs, errLines
}

// TestRollingUpdateUnderLoad: the endpoints of a Service are replaced one by
// one as a Deployment rollout does (new pod ready, old pod terminating, old
// pod gone from the slice, old pod dead) while a client connects every 20 ms;
// not one connection fails and the new pods take over.
func TestRollingUpdateUnderLoad(t *testing.T) {
	ctx, ns := scenario(t, "e2e-rolling")
	pods := addPods(t, ctx, "roll", 201, 4) // a, b serve first; c, d replace them
	current := endpoints(pods[:2])
	svc := createService(t, ctx, ns, "web", corev1.ServiceTypeClusterIP, pods[:2], framework.ServicePort{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80})
	vip := svc.Spec.ClusterIP + ":80"
	waitActive(t, ctx, "TCP", vip, pods[0].IP, pods[1].IP)

	l := startLoad(t, ctx, "", "tcp", vip, 20*time.Millisecond)
	time.Sleep(3 * time.Second)
	active := func(eps []framework.Endpoint) []string {
		var out []string
		for _, e := range eps {
			if !e.Terminating {
				out = append(out, e.IP)
			}
		}
		return out
	}
	set := func(eps []framework.Endpoint) {
		t.Helper()
		if err := framework.SetEndpoints(ctx, cp.Client, svc, eps...); err != nil {
			t.Fatal(err)
		}
		waitActive(t, ctx, "TCP", vip, active(eps)...)
	}
	for i, old := range []*framework.Pod{pods[0], pods[1]} {
		repl := endpoints(pods[2+i : 3+i])[0]
		current = append(current, repl) // the new pod is ready
		set(current)
		for j := range current { // the old pod is terminating
			if current[j].IP == old.IP {
				current[j].Terminating = true
			}
		}
		set(current)
		var kept []framework.Endpoint // the old pod leaves the slice
		for _, e := range current {
			if e.IP != old.IP {
				kept = append(kept, e)
			}
		}
		current = kept
		set(current)
		time.Sleep(2 * time.Second) // terminationGracePeriod: the pod drains, then dies
		guest(t, ctx, "ip -n "+old.Name+" link set eth0 down")
		t.Logf("replaced %s by %s", old.Name, repl.PodName)
	}
	time.Sleep(3 * time.Second)
	got, errs, errLines := l.stop(t, ctx)
	if errs != 0 {
		t.Fatalf("%d connections failed during the rolling update:\n%s", errs, strings.Join(errLines, "\n"))
	}
	for _, p := range pods {
		if got[p.Name] == 0 {
			t.Errorf("pod %s never answered during the rollout: %v", p.Name, got)
		}
	}
	if total := got["roll-a"] + got["roll-b"] + got["roll-c"] + got["roll-d"]; total < 100 {
		t.Errorf("only %d connections during the rollout: the load generator did not really run", total)
	}
	expectAnswers(t, ctx, "", "tcp", vip, 4, map[string]int{"roll-c": 2, "roll-d": 2})
}

// TestAPIServerRestart: with the apiserver stopped, kube-proxy keeps running
// and the data path keeps working across a periodic resync; when it comes
// back the daemon resumes its watches and applies new changes.
func TestAPIServerRestart(t *testing.T) {
	ctx, ns := scenario(t, "e2e-apiserver")
	pods := addPods(t, ctx, "apis", 211, 2)
	svc := createService(t, ctx, ns, "web", corev1.ServiceTypeClusterIP, pods, framework.ServicePort{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80})
	vip := svc.Spec.ClusterIP + ":80"
	waitRealServers(t, ctx, "TCP", vip, masq(pods))

	cp.StopAPIServer()
	stopped := true
	t.Cleanup(func() {
		if stopped {
			if err := cp.StartAPIServer(context.Background()); err != nil {
				t.Errorf("restarting the apiserver after a failure: %v", err)
			}
		}
	})
	logf("kube-apiserver stopped")
	// Longer than syncPeriod (10 s): a periodic full sync runs without the apiserver.
	time.Sleep(15 * time.Second)
	if !node.KubeProxyRunning(ctx) {
		t.Fatalf("kube-proxy exited while the apiserver was down:\n%s", node.KubeProxyLog(ctx, 30))
	}
	waitRealServers(t, ctx, "TCP", vip, masq(pods))
	expectAnswers(t, ctx, "", "tcp", vip, 4, map[string]int{"apis-a": 2, "apis-b": 2})

	if err := cp.StartAPIServer(ctx); err != nil {
		t.Fatal(err)
	}
	stopped = false
	logf("kube-apiserver restarted")
	if err := framework.SetEndpoints(ctx, cp.Client, svc, endpoints(pods[:1])...); err != nil {
		t.Fatal(err)
	}
	svc2 := createService(t, ctx, ns, "after", corev1.ServiceTypeClusterIP, pods[1:], framework.ServicePort{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80})
	// client-go's reflectors back off up to 30 s between attempts.
	err := framework.Eventually(ctx, 120*time.Second, time.Second, func(ctx context.Context) error {
		a, err := activeRealServers(ctx, "TCP", vip)
		if err != nil {
			return err
		}
		b, err := activeRealServers(ctx, "TCP", svc2.Spec.ClusterIP+":80")
		if err != nil {
			return err
		}
		if fmt.Sprint(a) != fmt.Sprintf("[%s:8080]", pods[0].IP) || fmt.Sprint(b) != fmt.Sprintf("[%s:8080]", pods[1].IP) {
			return fmt.Errorf("after the apiserver came back: %s has %v, new Service %s has %v", vip, a, svc2.Spec.ClusterIP, b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	expectAnswers(t, ctx, "", "tcp", svc2.Spec.ClusterIP+":80", 2, map[string]int{"apis-b": 2})
}

// TestTamperingRepaired: state removed behind kube-proxy's back (a virtual
// server, a real server, an ipset's entries, a KUBE chain's rules, the jump
// into KUBE-POSTROUTING, a kube-ipvs0 address; in the nftables pass a set's
// elements, a chain's rules, a base chain's jump and the whole table) is back within the periodic
// resync (syncPeriod 10 s, plus slack for the slow TCG VM), and the Service
// answers again.
func TestTamperingRepaired(t *testing.T) {
	ctx, ns := scenario(t, "e2e-tamper")
	pods := addPods(t, ctx, "tamp", 221, 2)
	svc := createService(t, ctx, ns, "web", corev1.ServiceTypeClusterIP, pods, framework.ServicePort{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80})
	ip := svc.Spec.ClusterIP
	vip := ip + ":80"
	waitRealServers(t, ctx, "TCP", vip, masq(pods))

	cases := []struct{ name, tamper, check string }{
		{"virtual server deleted", "ipvsadm -D -t " + vip,
			fmt.Sprintf("ipvsadm -Ln -t %s | grep -q %s:8080", vip, pods[0].IP)},
		{"real server deleted", fmt.Sprintf("ipvsadm -d -t %s -r %s:8080", vip, pods[1].IP),
			fmt.Sprintf("ipvsadm -Ln -t %s | grep -q %s:8080", vip, pods[1].IP)},
	}
	member := fmt.Sprintf(framework.ListSet("KUBE-CLUSTER-IP")+" | grep -qx '%s,tcp:80'", ip)
	if framework.NFTablesPass() {
		table := framework.NFTablesTable
		cases = append(cases, []struct{ name, tamper, check string }{
			{"set flushed", "nft flush set " + table + " ip-cluster-ip", member},
			{"services chain flushed", "nft flush chain " + table + " ip-services", framework.ServicesRuleUsesClusterIPs(false)},
			{"base chain's jump to postrouting deleted", "nft flush chain " + table + " ip-nat-postrouting",
				"nft list chain " + table + " ip-nat-postrouting | grep -q 'jump ip-postrouting'"},
			{"table deleted", "nft delete table " + table, member + " && " + framework.ServicesRuleUsesClusterIPs(false)},
		}...)
	} else {
		cases = append(cases, []struct{ name, tamper, check string }{
			{"ipset flushed", "ipset flush KUBE-CLUSTER-IP", member},
			{"KUBE-SERVICES flushed", "iptables -t nat -F KUBE-SERVICES", framework.ServicesRuleUsesClusterIPs(false)},
			{"jump to KUBE-POSTROUTING deleted", "eval iptables -t nat $(iptables -t nat -S POSTROUTING | grep -m1 -- '-j KUBE-POSTROUTING' | sed 's/^-A/-D/')",
				"iptables -t nat -S POSTROUTING | grep -q -- '-j KUBE-POSTROUTING'"},
		}...)
	}
	cases = append(cases, struct{ name, tamper, check string }{"kube-ipvs0 address removed", fmt.Sprintf("ip addr del %s/32 dev kube-ipvs0", ip),
		fmt.Sprintf("ip -4 addr show dev kube-ipvs0 | grep -qw 'inet %s/32'", ip)})
	var took []string
	for _, c := range cases {
		guest(t, ctx, c.check) // present before
		// Tamper and look at once: the check must fail now, or it proves nothing.
		out, err := vm.Sh(ctx, fmt.Sprintf("%s\nif %s; then echo STILL-THERE; fi", c.tamper, c.check))
		if err != nil {
			t.Fatalf("%s: tampering failed: %v %s", c.name, err, out)
		}
		if strings.Contains(out, "STILL-THERE") {
			t.Fatalf("%s: `%s` had no visible effect", c.name, c.tamper)
		}
		start := time.Now()
		err = framework.Eventually(ctx, 25*time.Second, 250*time.Millisecond, func(ctx context.Context) error {
			if _, err := vm.Sh(ctx, c.check); err != nil {
				return fmt.Errorf("%s: not repaired", c.name)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		took = append(took, c.name+" "+strconv.FormatFloat(time.Since(start).Seconds(), 'f', 1, 64)+" s")
	}
	t.Logf("repaired: %s", strings.Join(took, ", "))
	expectAnswers(t, ctx, "", "tcp", vip, 4, map[string]int{"tamp-a": 2, "tamp-b": 2})
}
