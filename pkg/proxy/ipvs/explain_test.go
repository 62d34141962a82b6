package ipvs

import (
	"context"
	"net"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/ipvs"
)

func explain(t *testing.T, e *testEnv, ns, name string) *Explanation {
	t.Helper()
	x, err := e.p.Explain(context.Background(), types.NamespacedName{Namespace: ns, Name: name})
	if err != nil {
		t.Fatal(err)
	}
	return x
}

// TestExplainHealthyService: every address of the Service, its real servers wanted,
// applied and read from the kernel alike, each endpoint in or out with its reason,
// and its set members and addresses in the kernel.
func TestExplainHealthyService(t *testing.T) {
	e := newTestEnv(t, v1.IPv4Protocol)
	e.start(makeService("ns", "web", clusterIP("10.96.0.1"), port("p", v1.ProtocolTCP, 80, 30080), externalIPs("203.0.113.5")),
		makeSlice("ns", "web", "web-1", tcp("p", 8080), endpoint("10.244.1.1"), endpoint("10.244.2.1"), endpoint("10.244.2.2", terminating(false)),
			endpoint("10.244.2.3", func(ep *discovery.Endpoint) {
				ep.Conditions.Ready, ep.Conditions.Serving = ptr.To(false), ptr.To(false)
			})))
	x := explain(t, e, "ns", "web")
	if x == nil || len(x.Ports) != 1 {
		t.Fatalf("explanation %+v", x)
	}
	pe := x.Ports[0]
	var vss []string
	for _, v := range pe.VirtualServers {
		vss = append(vss, v.VirtualServer)
		if !v.InSync || len(v.Desired) != 3 || rsText(v.Kernel) != rsText(v.Applied) || rsText(v.Kernel) != rsText(v.Desired) {
			t.Errorf("virtual server %s: in sync %v, wanted %s, applied %s, kernel %s (%s)", v.VirtualServer, v.InSync,
				rsText(v.Desired), rsText(v.Applied), rsText(v.Kernel), v.KernelError)
		}
	}
	for _, want := range []string{"TCP/10.96.0.1:80", "TCP/203.0.113.5:80", "TCP/192.168.1.10:30080"} {
		if !strings.Contains(strings.Join(vss, " "), want) {
			t.Errorf("no virtual server %s among %v", want, vss)
		}
	}
	why := map[string]string{}
	for _, ep := range pe.Endpoints {
		why[ep.Address] = ep.Why
	}
	if why["10.244.1.1:8080"] != "a real server" || why["10.244.2.2:8080"] != "terminating: draining at weight 0" || why["10.244.2.3:8080"] != "not ready" {
		t.Errorf("endpoints: %v", why)
	}
	for _, m := range x.SetMembers {
		if !m.Applied {
			t.Errorf("set member %s %s not in the kernel", m.Set, m.Member)
		}
	}
	if len(x.Addresses) != 2 || !x.Addresses[0].Bound {
		t.Errorf("addresses %+v", x.Addresses)
	}
	text := x.Text()
	for _, want := range []string{"Service ns/web (IPv4, rules backend iptables)", "virtual server TCP/10.96.0.1:80 rr in sync",
		"endpoint 10.244.2.3:8080 OUT", "endpoint 10.244.2.2:8080 IN", "KUBE-CLUSTER-IP 10.96.0.1 tcp/80 in the kernel"} {
		if !strings.Contains(text, want) {
			t.Errorf("text lacks %q:\n%s", want, text)
		}
	}
	if explain(t, e, "ns", "nosuch") != nil {
		t.Errorf("an unknown Service was explained")
	}
}

// TestExplainRefusedAndDrifted: a real server the kernel refuses is held back and
// shown as such; one deleted behind the daemon's back shows in the kernel's column
// but not in what the daemon believes.
func TestExplainRefusedAndDrifted(t *testing.T) {
	e := newTestEnv(t, v1.IPv4Protocol)
	e.start(makeService("ns", "a", clusterIP("10.96.0.1"), port("p", v1.ProtocolTCP, 80, 0)))
	e.ipvs.InjectError(ipvs.OpAddRS, errRefused)
	e.add(makeSlice("ns", "a", "a-1", tcp("p", 80), endpoint("10.244.2.1")))
	e.mustSync()
	x := explain(t, e, "ns", "a")
	if len(x.HeldBack) == 0 || x.Ports[0].VirtualServers[0].InSync {
		t.Errorf("a refused real server: held back %+v, in sync %v", x.HeldBack, x.Ports[0].VirtualServers[0].InSync)
	}
	if !strings.Contains(x.Text(), "HELD BACK") {
		t.Errorf("the text does not say what is held back:\n%s", x.Text())
	}

	e.ipvs.InjectError(ipvs.OpAddRS, nil)
	e.clock.Step(2 * minRetryInterval)
	e.mustSync()
	vs := &ipvs.VirtualServer{Address: net.ParseIP("10.96.0.1"), Protocol: "TCP", Port: 80}
	if err := e.ipvs.DeleteRealServer(context.Background(), vs, &ipvs.RealServer{Address: net.ParseIP("10.244.2.1"), Port: 80}); err != nil {
		t.Fatal(err)
	}
	x = explain(t, e, "ns", "a")
	v := x.Ports[0].VirtualServers[0]
	if rsText(v.Applied) != "10.244.2.1:80 w1" || rsText(v.Kernel) != "(none)" || !v.InSync || !v.KernelDiffers {
		t.Errorf("behind the daemon's back: applied %s, kernel %s, in sync %v, kernel differs %v", rsText(v.Applied), rsText(v.Kernel), v.InSync, v.KernelDiffers)
	}
	if !strings.Contains(x.Text(), "kernel:  (none)   KERNEL DIFFERS") {
		t.Errorf("the text does not say the kernel differs:\n%s", x.Text())
	}
}

// TestExplainLocalPolicyWithoutLocalEndpoints: an eTP=Local Service on a node
// without a local endpoint says so for each endpoint it leaves out.
func TestExplainLocalPolicyWithoutLocalEndpoints(t *testing.T) {
	e := newTestEnv(t, v1.IPv4Protocol)
	e.start(makeService("ns", "l", clusterIP("10.96.0.2"), port("p", v1.ProtocolTCP, 80, 30081), etpLocal(32000)),
		makeSlice("ns", "l", "l-1", tcp("p", 80), endpoint("10.244.2.7")))
	x := explain(t, e, "ns", "l")
	pe := x.Ports[0]
	if !pe.ExternalPolicyLocal {
		t.Errorf("port %+v", pe)
	}
	if len(pe.Endpoints) != 1 || !pe.Endpoints[0].Used {
		// Every virtual server falls back to it (as upstream).
		t.Errorf("endpoints %+v", pe.Endpoints)
	}
	if len(x.Notes) != 1 || !strings.Contains(x.Notes[0], "no local endpoint") {
		t.Errorf("notes %q", x.Notes)
	}
	if text := x.Text(); !strings.Contains(text, "externalTrafficPolicy=Local") || !strings.Contains(text, "note: externalTrafficPolicy is Local but this node has no local endpoint") {
		t.Errorf("text:\n%s", text)
	}
}
