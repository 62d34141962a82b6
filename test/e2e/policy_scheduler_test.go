//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/test/e2e/framework"
)

// Pod addresses 10.244.0.251-254. The file sorts before scenarios_test.go, whose
// last scenarios stop the daemon for --cleanup.

const (
	annScheduler      = "kube-proxy-ipvs.io/scheduler"
	annSchedulerFlags = "kube-proxy-ipvs.io/scheduler-flags"
)

// vsHeader returns the `ipvsadm -Ln` line of one virtual server, and its
// connection counter.
func vsHeader(t *testing.T, ctx context.Context, vip string) (string, int) {
	t.Helper()
	line := strings.TrimSpace(guest(t, ctx, "ipvsadm -Ln -t "+vip+" | awk '$1==\"TCP\"'"))
	stats := strings.TrimSpace(guest(t, ctx, "ipvsadm -Ln --stats --exact -t "+vip+" | awk '$1==\"TCP\" {print $3}'"))
	n, err := strconv.Atoi(stats)
	if err != nil {
		t.Fatalf("connection counter of %s: %q", vip, stats)
	}
	return line, n
}

func setAnnotations(t *testing.T, ctx context.Context, svc *corev1.Service, kv map[string]string) {
	t.Helper()
	cur, err := cp.Client.CoreV1().Services(svc.Namespace).Get(ctx, svc.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cur.Annotations = kv
	if _, err := cp.Client.CoreV1().Services(svc.Namespace).Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestPerServiceScheduler: under a client connecting every 20 ms, a Service
// starts rr, is annotated lc, then sh with sh-port, then the annotation goes:
// each scheduler shows in ipvsadm, the virtual server is edited in place (its
// connection counter keeps growing) and no connection fails, not even in the
// kernel's own scheduler swap window (see below). A Service asking
// for mh on a node where the kernel cannot load ip_vs_mh, and one asking for a
// made-up scheduler, keep working on the configured scheduler with a Warning
// Event, while another Service changes in the same sync.
func TestPerServiceScheduler(t *testing.T) {
	ctx, ns := scenario(t, "e2e-sched")
	pods := addPods(t, ctx, "sch", 251, 3)
	httpPort := framework.ServicePort{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}
	svc := createService(t, ctx, ns, "web", corev1.ServiceTypeClusterIP, pods, httpPort)
	vip := svc.Spec.ClusterIP + ":80"
	waitRealServers(t, ctx, "TCP", vip, masq(pods))

	// A 6 s timeout: a SYN the swap dropped is sent again after 1 s and 3 s, and on
	// a starved emulated host a connection can be slow for reasons of its own; a
	// refusal is a failure whatever the timeout.
	l := startLoad(t, ctx, "", "tcp", vip, 20*time.Millisecond, "--stamp", "--timeout", "6s")
	_, lastConns := vsHeader(t, ctx, vip)
	steps := []struct {
		ann  map[string]string
		want []string // words of the ipvsadm header after the address
	}{
		{map[string]string{annScheduler: "lc"}, []string{"lc"}},
		{map[string]string{annScheduler: "sh", annSchedulerFlags: "sh-port"}, []string{"sh", "sh-port"}},
		{nil, []string{"rr"}},
	}
	for _, s := range steps {
		time.Sleep(2 * time.Second) // let the load run on the previous scheduler
		setAnnotations(t, ctx, svc, s.ann)
		// A change can wait behind a periodic full resync (issue 15), which takes
		// seconds on a loaded TCG host.
		err := framework.Eventually(ctx, 60*time.Second, 200*time.Millisecond, func(ctx context.Context) error {
			line, _ := vsHeader(t, ctx, vip)
			for _, w := range s.want {
				if !strings.Contains(" "+strings.NewReplacer("(", " ", ")", " ", ",", " ").Replace(line)+" ", " "+w+" ") {
					return fmt.Errorf("ipvsadm shows %q, want %v", line, s.want)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		line, conns := vsHeader(t, ctx, vip)
		if conns < lastConns {
			t.Fatalf("connection counter went from %d to %d: the virtual server was re-created (%s)", lastConns, conns, line)
		}
		t.Logf("annotations %v: %s, %d connections so far", s.ann, line, conns)
		lastConns = conns
	}
	time.Sleep(2 * time.Second)
	got, _, errLines := l.stop(t, ctx)
	// Changing a virtual server's scheduler leaves it without one for an RCU grace
	// period (ip_vs_edit_service unbinds the old scheduler, synchronize_rcu(), binds
	// the new one); a SYN that arrives then finds no destination and IPVS answers with
	// an ICMP port unreachable. The daemon drops those while it changes the scheduler
	// (quiet.go), so such a client retransmits its SYN 1 s later instead of failing:
	// no connection may fail (but the load generator's own first attempts).
	for _, e := range errLines {
		var n int
		if _, err := fmt.Sscanf(e, "#%d", &n); err == nil && n < 25 {
			t.Logf("ignored during the load's start: %s", e)
			continue
		}
		t.Errorf("connection failed while the scheduler changed: %s", e)
	}
	// Attempts that ended more than 0.9 s after the one before were held up, most
	// likely by a SYN retransmitted across a swap (informational: whether a SYN
	// falls into the window is a matter of timing).
	var late []string
	prev := int64(0)
	for _, line := range strings.Split(l.out, "\n") {
		i := strings.LastIndex(line, " at=")
		if i < 0 {
			continue
		}
		at, err := strconv.ParseInt(line[i+4:], 10, 64)
		if err != nil {
			continue
		}
		if prev != 0 && at-prev > 900 {
			late = append(late, fmt.Sprintf("%d ms: %s", at-prev, line))
		}
		prev = at
	}
	t.Logf("%d connections late by more than 0.9 s (a SYN retransmitted across a swap, or a busy host): %v", len(late), late)
	total := 0
	for _, n := range got {
		total += n
	}
	if total < 100 {
		t.Errorf("only %d connections answered", total)
	}

	// The kernel cannot load ip_vs_mh on this node; a made-up name never exists.
	guest(t, ctx, `m=$(find /lib/modules -name 'ip_vs_mh.ko*' | head -1)
if lsmod | grep -q '^ip_vs_mh '; then rmmod ip_vs_mh; fi
if [ -n "$m" ]; then mv "$m" /tmp/; fi
if modprobe ip_vs_mh 2>/dev/null; then echo "ip_vs_mh still loads" >&2; exit 1; fi`)
	t.Cleanup(func() {
		_, _ = vm.Sh(context.Background(), `for f in /tmp/ip_vs_mh.ko*; do [ -e "$f" ] && mv "$f" "$(dirname $(find /lib/modules -name 'ip_vs_sh.ko*' | head -1))/"; done; true`)
	})
	maglev := createServiceWith(t, ctx, ns, "maglev", corev1.ServiceTypeClusterIP,
		func(s *corev1.Service) { s.Annotations = map[string]string{annScheduler: "mh"} }, endpoints(pods[:1]), httpPort)
	madeUp := createServiceWith(t, ctx, ns, "made-up", corev1.ServiceTypeClusterIP,
		func(s *corev1.Service) { s.Annotations = map[string]string{annScheduler: "fastest"} }, endpoints(pods[1:2]), httpPort)
	if err := framework.SetEndpoints(ctx, cp.Client, svc, endpoints(pods[:2])...); err != nil {
		t.Fatal(err)
	}
	waitActive(t, ctx, "TCP", maglev.Spec.ClusterIP+":80", pods[0].IP)
	waitActive(t, ctx, "TCP", madeUp.Spec.ClusterIP+":80", pods[1].IP)
	waitActive(t, ctx, "TCP", vip, pods[0].IP, pods[1].IP)
	for _, s := range []*corev1.Service{maglev, madeUp} {
		if line, _ := vsHeader(t, ctx, s.Spec.ClusterIP+":80"); !strings.Contains(line, " rr") {
			t.Errorf("%s: %q, want the configured rr", s.Name, line)
		}
	}
	expectAnswers(t, ctx, "", "tcp", maglev.Spec.ClusterIP+":80", 2, map[string]int{pods[0].Name: 2})
	expectAnswers(t, ctx, "", "tcp", madeUp.Spec.ClusterIP+":80", 2, map[string]int{pods[1].Name: 2})
	err := framework.Eventually(ctx, 30*time.Second, time.Second, func(ctx context.Context) error {
		evs, err := cp.Client.EventsV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		seen := map[string]int{}
		for _, ev := range evs.Items {
			if ev.Reason == "KubeProxyValueNotProgrammed" {
				seen[ev.Regarding.Name]++
			}
		}
		if seen["maglev"] != 1 || seen["made-up"] != 1 {
			return fmt.Errorf("Warning Events per Service: %v, want one for maglev and one for made-up", seen)
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
}
