//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/test/e2e/framework"
)

// Traffic policies, load balancer options and the Services kube-proxy must
// leave alone. Pod address blocks (10.244.0.X): 121-129 source ranges, 131-139
// ipMode, 141-149 eTP=Local, 151-159 iTP=Local, 161-169 terminating, 171-179
// ignored Services, 181-189 SCTP, 191-199 topology. Endpoints "on another
// node" use 10.244.1.0/24, which nothing answers: tests only check that they
// are (or are not) programmed, never send traffic to them.

const otherNode = "other-node"

// createServiceWith is createService with mutate applied to the Service and
// explicit endpoints (their node, zone, hints and conditions).
func createServiceWith(t *testing.T, ctx context.Context, ns, name string, typ corev1.ServiceType, mutate func(*corev1.Service), eps []framework.Endpoint, ports ...framework.ServicePort) *corev1.Service {
	t.Helper()
	svc, err := framework.CreateServiceWith(ctx, cp.Client, ns, name, typ, mutate, ports...)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := framework.CreateEndpointSlice(ctx, cp.Client, svc, eps...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = framework.DeleteService(context.Background(), cp.Client, svc) })
	t.Logf("Service %s/%s: type %s ClusterIP %s ports %v", ns, name, typ, svc.Spec.ClusterIP, svc.Spec.Ports)
	return svc
}

// activeRealServers returns the real servers of vip with a weight above zero
// (a removed endpoint may linger with weight 0 while its connections drain),
// sorted, as "ip:port".
func activeRealServers(ctx context.Context, proto, vip string) ([]string, error) {
	rs, err := node.VirtualServer(ctx, proto, vip)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, r := range rs {
		if f := strings.Fields(r); f[2] != "0" {
			out = append(out, f[0])
		}
	}
	return out, nil
}

// waitActive waits until vip's real servers with weight > 0 are exactly want
// (pod IPs, port 8080 added).
func waitActive(t *testing.T, ctx context.Context, proto, vip string, want ...string) {
	t.Helper()
	var w []string
	for _, ip := range want {
		w = append(w, ip+":8080")
	}
	sort.Strings(w)
	err := framework.Eventually(ctx, 60*time.Second, time.Second, func(ctx context.Context) error {
		got, err := activeRealServers(ctx, proto, vip)
		if err != nil {
			return err
		}
		if strings.Join(got, ",") != strings.Join(w, ",") {
			return fmt.Errorf("IPVS %s %s has active real servers %q, want %q", proto, vip, got, w)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// waitGuest waits until script succeeds in the VM.
func waitGuest(t *testing.T, ctx context.Context, what, script string) {
	t.Helper()
	err := framework.Eventually(ctx, 60*time.Second, time.Second, func(ctx context.Context) error {
		if out, err := vm.Sh(ctx, script); err != nil {
			return fmt.Errorf("%s: %v %s", what, err, out)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// syncWitness creates a throwaway Service and waits until it is programmed:
// syncs apply changes in order, so anything written before it has been
// handled too. Negative checks ("X is not programmed") run after it.
func syncWitness(t *testing.T, ctx context.Context, ns string) {
	t.Helper()
	svc, err := framework.CreateService(ctx, cp.Client, ns, fmt.Sprintf("witness-%d", time.Now().UnixNano()%100000), corev1.ServiceTypeClusterIP,
		framework.ServicePort{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = framework.DeleteService(context.Background(), cp.Client, svc) }()
	waitGuest(t, ctx, "witness Service programmed", "ipvsadm -Ln -t "+svc.Spec.ClusterIP+":80 >/dev/null")
}

func ips(pods []*framework.Pod) []string {
	var out []string
	for _, p := range pods {
		out = append(out, p.IP)
	}
	return out
}

// TestLoadBalancerSourceRanges: a LoadBalancer Service with
// loadBalancerSourceRanges answers on its ingress IP only to the allowed
// source (pod lbsr-b); another pod's connections (lbsr-c) are dropped, while
// the ClusterIP stays open to it. The kernel holds the KUBE-LOAD-BALANCER-FW
// and KUBE-LOAD-BALANCER-SOURCE-CIDR entries.
func TestLoadBalancerSourceRanges(t *testing.T) {
	ctx, ns := scenario(t, "e2e-lbsr")
	pods := addPods(t, ctx, "lbsr", 121, 3)
	backend, allowed, denied := pods[0], pods[1], pods[2]
	svc := createServiceWith(t, ctx, ns, "fw", corev1.ServiceTypeLoadBalancer,
		func(s *corev1.Service) { s.Spec.LoadBalancerSourceRanges = []string{allowed.IP + "/32"} },
		endpoints(pods[:1]), framework.ServicePort{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80})
	svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "10.0.2.61"}}
	if _, err := cp.Client.CoreV1().Services(ns).UpdateStatus(ctx, svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitActive(t, ctx, "TCP", "10.0.2.61:80", backend.IP)
	guest(t, ctx, framework.ListSet("KUBE-LOAD-BALANCER-FW")+" | grep -qx '10.0.2.61,tcp:80'")
	guest(t, ctx, fmt.Sprintf(framework.ListSet("KUBE-LOAD-BALANCER-SOURCE-CIDR")+" | grep -Eqx '10.0.2.61,tcp:80,%s(/32)?'", allowed.IP))

	expectAnswers(t, ctx, allowed.Name, "tcp", "10.0.2.61:80", 3, map[string]int{backend.Name: 3})
	out, err := node.ClientFrom(ctx, denied.Name, "tcp", "10.0.2.61:80", 2)
	if err != nil {
		t.Fatal(err)
	}
	if got, errs := framework.CountAnswers(out); errs != 2 || len(got) != 0 {
		t.Fatalf("%s (%s) is outside loadBalancerSourceRanges but reached the LB IP: %v (%d errors)\n%s", denied.Name, denied.IP, got, errs, out)
	}
	t.Logf("denied source %s -> 10.0.2.61:80: %s", denied.IP, strings.ReplaceAll(out, "\n", " | "))
	expectAnswers(t, ctx, denied.Name, "tcp", svc.Spec.ClusterIP+":80", 2, map[string]int{backend.Name: 2})
}

// TestLoadBalancerIPModeProxy: an ingress IP with ipMode Proxy belongs to a
// load balancer that terminates connections itself: no virtual server, no
// kube-ipvs0 address, no ipset entry for it; the VIP-mode ingress IP of the
// same Service is programmed.
func TestLoadBalancerIPModeProxy(t *testing.T) {
	ctx, ns := scenario(t, "e2e-ipmode")
	pods := addPods(t, ctx, "ipm", 131, 1)
	svc := createService(t, ctx, ns, "proxy-lb", corev1.ServiceTypeLoadBalancer, pods, framework.ServicePort{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80})
	svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{
		{IP: "10.0.2.62", IPMode: ptr.To(corev1.LoadBalancerIPModeProxy)},
		{IP: "10.0.2.63", IPMode: ptr.To(corev1.LoadBalancerIPModeVIP)},
	}
	if _, err := cp.Client.CoreV1().Services(ns).UpdateStatus(ctx, svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitActive(t, ctx, "TCP", "10.0.2.63:80", pods[0].IP)
	expectAnswers(t, ctx, "", "tcp", "10.0.2.63:80", 2, map[string]int{"ipm-a": 2})
	out := guest(t, ctx, `ipvsadm -Ln | grep -w '10.0.2.62:80' || true
ip -4 addr show dev kube-ipvs0 | grep -w 'inet 10.0.2.62/32' || true
`+framework.ListSet("KUBE-LOAD-BALANCER")+` | grep '^10.0.2.62,' || true`)
	if strings.TrimSpace(out) != "" {
		t.Fatalf("the ipMode Proxy ingress IP 10.0.2.62 is programmed:\n%s", out)
	}
}

// healthCheck fetches http://NodeIP:port/ in the VM: status code and body.
func healthCheck(t *testing.T, ctx context.Context, port int32) (int, string) {
	t.Helper()
	r, err := vm.Exec(ctx, "/kpi/bin/e2e-agent", "get", "--url", fmt.Sprintf("http://%s:%d/", framework.NodeIP, port))
	if err != nil {
		t.Fatal(err)
	}
	if r.ExitCode != 0 {
		t.Fatalf("health check node port %d: %s%s", port, r.Stdout, r.Stderr)
	}
	var code int
	status, body, _ := strings.Cut(r.Stdout, "\n")
	if _, err := fmt.Sscanf(status, "STATUS %d", &code); err != nil {
		t.Fatalf("health check node port %d: unexpected output %q", port, r.Stdout)
	}
	return code, body
}

// TestExternalTrafficPolicyLocal: with externalTrafficPolicy Local the node
// port and LB IP virtual servers hold only this node's endpoints (the
// ClusterIP keeps them all), the node port is in KUBE-NODE-PORT-LOCAL-TCP,
// the client's source address is preserved, and the healthCheckNodePort
// answers 200 with the local endpoint count, 503 once none is local (then the
// node port falls back to the cluster endpoints, as upstream's ipvs mode).
func TestExternalTrafficPolicyLocal(t *testing.T) {
	ctx, ns := scenario(t, "e2e-etp-local")
	pods := addPods(t, ctx, "etp", 141, 2)
	remote := framework.Endpoint{PodName: "etp-remote", IP: "10.244.1.41", Node: otherNode}
	eps := append(endpoints(pods), remote)
	svc := createServiceWith(t, ctx, ns, "local", corev1.ServiceTypeLoadBalancer,
		func(s *corev1.Service) { s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal },
		eps, framework.ServicePort{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80})
	svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "10.0.2.64"}}
	if _, err := cp.Client.CoreV1().Services(ns).UpdateStatus(ctx, svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	nodePort, hcPort := svc.Spec.Ports[0].NodePort, svc.Spec.HealthCheckNodePort
	if nodePort == 0 || hcPort == 0 {
		t.Fatalf("the apiserver allocated nodePort %d healthCheckNodePort %d", nodePort, hcPort)
	}
	np := fmt.Sprintf("%s:%d", framework.NodeIP, nodePort)
	local := ips(pods)
	waitActive(t, ctx, "TCP", np, local...)
	waitActive(t, ctx, "TCP", "10.0.2.64:80", local...)
	waitActive(t, ctx, "TCP", svc.Spec.ClusterIP+":80", append(local, remote.IP)...)
	guest(t, ctx, fmt.Sprintf(framework.ListSet("KUBE-NODE-PORT-LOCAL-TCP")+" | grep -qx '%d'", nodePort))
	guest(t, ctx, framework.ListSet("KUBE-LOAD-BALANCER-LOCAL")+" | grep -qx '10.0.2.64,tcp:80'")

	// From the node to NodeIP:nodePort: only local pods, no masquerade.
	out, err := node.Client(ctx, "tcp", np, 4)
	if err != nil {
		t.Fatal(err)
	}
	got, errs := framework.CountAnswers(out)
	if errs != 0 || fmt.Sprint(got) != "map[etp-a:2 etp-b:2]" {
		t.Fatalf("node -> %s answered %v with %d errors, want 2 per local pod:\n%s", np, got, errs, out)
	}
	for _, line := range strings.Split(out, "\n") {
		if !strings.Contains(line, " from="+framework.NodeIP+":") {
			t.Errorf("eTP=Local must keep the client address %s, got %q", framework.NodeIP, line)
		}
	}

	code, body := healthCheck(t, ctx, hcPort)
	if code != 200 || !strings.Contains(body, `"localEndpoints": 2`) {
		t.Fatalf("health check with 2 local endpoints: %d %s, want 200 with localEndpoints 2", code, body)
	}
	if err := framework.SetEndpoints(ctx, cp.Client, svc, remote); err != nil {
		t.Fatal(err)
	}
	err = framework.Eventually(ctx, 60*time.Second, time.Second, func(ctx context.Context) error {
		if code, body := healthCheck(t, ctx, hcPort); code != 503 || !strings.Contains(body, `"localEndpoints": 0`) {
			return fmt.Errorf("health check with no local endpoint: %d %s, want 503 with localEndpoints 0", code, body)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// As upstream's ipvs mode (kubernetes#97081): with no local endpoint the
	// external virtual servers fall back to the cluster endpoints, so that pods
	// on this node still reach the Service; the 503 steers load balancers away.
	waitActive(t, ctx, "TCP", np, remote.IP)
	waitActive(t, ctx, "TCP", svc.Spec.ClusterIP+":80", remote.IP)
}

// TestInternalTrafficPolicyLocal: with internalTrafficPolicy Local the
// ClusterIP only reaches this node's endpoints; with none local it has no
// real server at all (never a remote one).
func TestInternalTrafficPolicyLocal(t *testing.T) {
	ctx, ns := scenario(t, "e2e-itp-local")
	pods := addPods(t, ctx, "itp", 151, 1)
	remote := framework.Endpoint{PodName: "itp-remote", IP: "10.244.1.51", Node: otherNode}
	svc := createServiceWith(t, ctx, ns, "local", corev1.ServiceTypeClusterIP,
		func(s *corev1.Service) {
			s.Spec.InternalTrafficPolicy = ptr.To(corev1.ServiceInternalTrafficPolicyLocal)
		},
		append(endpoints(pods), remote), framework.ServicePort{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80})
	vip := svc.Spec.ClusterIP + ":80"
	waitActive(t, ctx, "TCP", vip, pods[0].IP)
	expectAnswers(t, ctx, "", "tcp", vip, 3, map[string]int{"itp-a": 3})

	if err := framework.SetEndpoints(ctx, cp.Client, svc, remote); err != nil {
		t.Fatal(err)
	}
	waitActive(t, ctx, "TCP", vip)
	rs, err := node.RealServers(ctx, "TCP", vip)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if strings.HasPrefix(r, remote.IP+":") {
			t.Fatalf("iTP=Local Service %s got the remote endpoint %s", vip, r)
		}
	}
}

// TestTerminatingEndpointFallback: terminating endpoints get no new traffic
// while a ready one exists; when none is ready the serving terminating ones
// are used (so a rolling update never drops the Service), and terminating
// endpoints that stopped serving never are.
func TestTerminatingEndpointFallback(t *testing.T) {
	ctx, ns := scenario(t, "e2e-terminating")
	pods := addPods(t, ctx, "term", 161, 2)
	a, b := endpoints(pods)[0], endpoints(pods)[1]
	bTerm := b
	bTerm.Terminating = true
	svc := createServiceWith(t, ctx, ns, "web", corev1.ServiceTypeClusterIP, nil,
		[]framework.Endpoint{a, bTerm}, framework.ServicePort{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80})
	vip := svc.Spec.ClusterIP + ":80"
	waitActive(t, ctx, "TCP", vip, a.IP)
	expectAnswers(t, ctx, "", "tcp", vip, 2, map[string]int{"term-a": 2})

	aTerm := a
	aTerm.Terminating = true
	if err := framework.SetEndpoints(ctx, cp.Client, svc, aTerm, bTerm); err != nil {
		t.Fatal(err)
	}
	waitActive(t, ctx, "TCP", vip, a.IP, b.IP)
	expectAnswers(t, ctx, "", "tcp", vip, 4, map[string]int{"term-a": 2, "term-b": 2})

	aGone := aTerm
	aGone.NotServing = true
	if err := framework.SetEndpoints(ctx, cp.Client, svc, aGone, bTerm); err != nil {
		t.Fatal(err)
	}
	waitActive(t, ctx, "TCP", vip, b.IP)
	expectAnswers(t, ctx, "", "tcp", vip, 2, map[string]int{"term-b": 2})
}

// TestIgnoredServices: a headless Service and a Service labelled for another
// proxy (service.kubernetes.io/service-proxy-name) get nothing in the kernel;
// removing the label makes the second one programmed.
func TestIgnoredServices(t *testing.T) {
	ctx, ns := scenario(t, "e2e-ignored")
	pods := addPods(t, ctx, "ign", 171, 1)
	headless := createServiceWith(t, ctx, ns, "headless", corev1.ServiceTypeClusterIP,
		func(s *corev1.Service) { s.Spec.ClusterIP = corev1.ClusterIPNone },
		endpoints(pods), framework.ServicePort{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80})
	other := createServiceWith(t, ctx, ns, "other-proxy", corev1.ServiceTypeNodePort,
		func(s *corev1.Service) {
			s.Labels = map[string]string{"service.kubernetes.io/service-proxy-name": "some-other-proxy"}
		},
		endpoints(pods), framework.ServicePort{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80})
	if headless.Spec.ClusterIP != corev1.ClusterIPNone {
		t.Fatalf("headless Service got ClusterIP %q", headless.Spec.ClusterIP)
	}
	syncWitness(t, ctx, ns)
	ip, nodePort := other.Spec.ClusterIP, other.Spec.Ports[0].NodePort
	out := guest(t, ctx, fmt.Sprintf(`ipvsadm -Ln | grep -e '%[1]s:8080' -e '%[2]s:80' -e ':%[3]d ' || true
ip -4 addr show dev kube-ipvs0 | grep -w 'inet %[2]s/32' || true
`+framework.ListSet("KUBE-CLUSTER-IP")+` | grep '^%[2]s,' || true
`+framework.ListSet("KUBE-NODE-PORT-TCP")+` | grep -x '%[3]d' || true`, pods[0].IP, ip, nodePort))
	if strings.TrimSpace(out) != "" {
		t.Fatalf("a headless or other-proxy Service is programmed:\n%s", out)
	}

	patch := []byte(`{"metadata":{"labels":{"service.kubernetes.io/service-proxy-name":null}}}`)
	if _, err := cp.Client.CoreV1().Services(ns).Patch(ctx, other.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitActive(t, ctx, "TCP", ip+":80", pods[0].IP)
	waitActive(t, ctx, "TCP", fmt.Sprintf("%s:%d", framework.NodeIP, nodePort), pods[0].IP)
	expectAnswers(t, ctx, "", "tcp", ip+":80", 2, map[string]int{"ign-a": 2})
}

// TestSCTP: an SCTP ClusterIP Service becomes an SCTP virtual server with a
// KUBE-CLUSTER-IP `ip,sctp:port` entry, and SCTP associations from the node
// reach both pods in turn.
func TestSCTP(t *testing.T) {
	ctx, ns := scenario(t, "e2e-sctp")
	pods := addPods(t, ctx, "sctp", 181, 2)
	// The pods answer SCTP on 8080 directly first: a broken testbed must not
	// look like a kube-proxy bug.
	for _, p := range pods {
		out, err := node.Client(ctx, "sctp", p.IP+":8080", 1)
		if err != nil || !strings.HasPrefix(out, p.Name+" ") {
			t.Fatalf("pod %s does not answer SCTP directly: %q %v", p.Name, out, err)
		}
	}
	svc := createService(t, ctx, ns, "sctp", corev1.ServiceTypeClusterIP, pods, framework.ServicePort{Name: "sctp", Protocol: corev1.ProtocolSCTP, Port: 80})
	vip := svc.Spec.ClusterIP + ":80"
	waitRealServers(t, ctx, "SCTP", vip, masq(pods))
	guest(t, ctx, fmt.Sprintf(framework.ListSet("KUBE-CLUSTER-IP")+" | grep -qx '%s,sctp:80'", svc.Spec.ClusterIP))
	expectAnswers(t, ctx, "", "sctp", vip, 4, map[string]int{"sctp-a": 2, "sctp-b": 2})
}

// TestTopologyHints: with zone hints on every endpoint, the node (labelled
// zone-a) only uses the endpoints hinted for zone-a; once an endpoint lacks
// hints, all of them are used again.
func TestTopologyHints(t *testing.T) {
	requireKubeProxy(t)
	dumpOnFailure(t)
	ctx := context.Background()
	setZone := func(zone string) {
		v := "null"
		if zone != "" {
			v = `"` + zone + `"`
		}
		patch := []byte(`{"metadata":{"labels":{"topology.kubernetes.io/zone":` + v + `}}}`)
		if _, err := cp.Client.CoreV1().Nodes().Patch(ctx, framework.NodeName, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	setZone("zone-a")
	t.Cleanup(func() { setZone("") })
	ns := newNamespace(t, ctx, "e2e-topology")
	pods := addPods(t, ctx, "topo", 191, 3)
	eps := endpoints(pods)
	for i, zone := range []string{"zone-a", "zone-b", "zone-a"} {
		eps[i].Zone, eps[i].ZoneHints = zone, []string{zone}
	}
	svc := createServiceWith(t, ctx, ns, "hinted", corev1.ServiceTypeClusterIP,
		func(s *corev1.Service) {
			s.Spec.TrafficDistribution = ptr.To(corev1.ServiceTrafficDistributionPreferClose)
		},
		eps, framework.ServicePort{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80})
	vip := svc.Spec.ClusterIP + ":80"
	waitActive(t, ctx, "TCP", vip, pods[0].IP, pods[2].IP)
	expectAnswers(t, ctx, "", "tcp", vip, 4, map[string]int{"topo-a": 2, "topo-c": 2})

	eps[1].ZoneHints = nil
	if err := framework.SetEndpoints(ctx, cp.Client, svc, eps...); err != nil {
		t.Fatal(err)
	}
	waitActive(t, ctx, "TCP", vip, ips(pods)...)
	expectAnswers(t, ctx, "", "tcp", vip, 3, map[string]int{"topo-a": 1, "topo-b": 1, "topo-c": 1})
}
