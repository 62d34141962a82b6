//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/test/e2e/framework"
)

// Pod addresses 10.244.0.225-227.

// explainText asks the daemon on the node what it knows of ns/name, as an
// operator does (kube-proxy explain, through the metrics server).
func explainText(t *testing.T, ctx context.Context, ns, name string) string {
	t.Helper()
	return guest(t, ctx, fmt.Sprintf("/kpi/bin/kube-proxy explain %s/%s", ns, name))
}

// waitExplain waits until the explanation of ns/name holds every one of want.
func waitExplain(t *testing.T, ctx context.Context, ns, name string, want ...string) string {
	t.Helper()
	var text string
	err := framework.Eventually(ctx, 60*time.Second, time.Second, func(ctx context.Context) error {
		text = explainText(t, ctx, ns, name)
		for _, w := range want {
			if !strings.Contains(text, w) {
				return fmt.Errorf("the explanation lacks %q", w)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("%v:\n%s", err, text)
	}
	return text
}

// TestExplain: `kube-proxy explain NS/NAME` on the node tells, read from the
// running daemon and the kernel: a healthy Service's virtual servers in sync with
// each endpoint in; a multicast endpoint left out and refused with its reason; an
// eTP=Local Service without a local endpoint falling back to every endpoint, said
// so; and a real server deleted behind the daemon's back, as the kernel now holds
// it, until the periodic resync puts it back.
func TestExplain(t *testing.T) {
	ctx, ns := scenario(t, "e2e-explain")
	pods := addPods(t, ctx, "exp", 225, 3)
	httpPort := framework.ServicePort{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}

	web := createService(t, ctx, ns, "web", corev1.ServiceTypeNodePort, pods[:2], httpPort)
	vip := web.Spec.ClusterIP + ":80"
	waitActive(t, ctx, "TCP", vip, pods[0].IP, pods[1].IP)
	text := waitExplain(t, ctx, ns, "web", "virtual server TCP/"+vip+" rr in sync",
		fmt.Sprintf("virtual server TCP/%s:%d", framework.NodeIP, web.Spec.Ports[0].NodePort),
		"endpoint "+pods[0].IP+":8080 IN", "KUBE-CLUSTER-IP "+web.Spec.ClusterIP+" tcp/80 in the kernel", web.Spec.ClusterIP+" bound")
	if strings.Contains(text, "NOT") || strings.Contains(text, "DIFFERS") {
		t.Errorf("a healthy Service explained with something missing:\n%s", text)
	}
	if out := guest(t, ctx, fmt.Sprintf("/kpi/bin/kube-proxy explain %s/web -o json", ns)); !strings.Contains(out, `"inSync": true`) {
		t.Errorf("JSON explanation:\n%s", out)
	}

	// A multicast endpoint next to a pod: left out, refused, with the reason.
	createServiceWith(t, ctx, ns, "mcast", corev1.ServiceTypeClusterIP, nil,
		[]framework.Endpoint{{PodName: "not-a-pod", IP: "239.1.2.3"}, {PodName: pods[2].Name, IP: pods[2].IP}}, httpPort)
	waitExplain(t, ctx, ns, "mcast", "endpoint 239.1.2.3:8080 OUT", "address not usable: multicast address",
		`REFUSED endpoint "239.1.2.3": multicast address`, "endpoint "+pods[2].IP+":8080 IN")

	// eTP=Local with the only endpoint on another node.
	createServiceWith(t, ctx, ns, "local", corev1.ServiceTypeNodePort,
		func(s *corev1.Service) { s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal },
		[]framework.Endpoint{{PodName: "remote", IP: "10.244.1.9", Node: "node-b"}}, httpPort)
	waitExplain(t, ctx, ns, "local", "externalTrafficPolicy=Local", "note: externalTrafficPolicy is Local but this node has no local endpoint")

	// Behind the daemon's back: the kernel's column says what it holds now. (A
	// periodic resync may put it back between the delete and the question: then
	// delete it again.)
	differs := false
	for try := 0; try < 3 && !differs; try++ {
		guest(t, ctx, fmt.Sprintf("ipvsadm -d -t %s -r %s:8080", vip, pods[1].IP))
		text = explainText(t, ctx, ns, "web")
		differs = strings.Contains(text, "kernel:  "+pods[0].IP+":8080 w1   KERNEL DIFFERS")
	}
	if !differs {
		t.Errorf("a real server deleted behind the daemon's back is not told apart:\n%s", text)
	}
}
