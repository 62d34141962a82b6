package ipvs

import (
	"net"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/ipvs"
)

// TestClusterKeysOfState: a state's ClusterIP keys are those of its ClusterIP virtual
// servers, also when the Service names its own ClusterIP as an external address, and
// they agree with what updateClusterOwners computes from the ports (clusterKeysOf).
func TestClusterKeysOfState(t *testing.T) {
	clusterIP := net.ParseIP("10.96.0.1").To4()
	name := &proxy.ServicePortName{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "a"}, Port: "p", Protocol: v1.ProtocolTCP}
	bc := &buildContext{family: v1.IPv4Protocol, scheduler: "rr", clusterOwner: map[vsKey]*types.NamespacedName{}}
	for _, tc := range []struct {
		name string
		info proxy.ServicePortInfo
		want []vsKey
	}{
		{name: "ClusterIP only", info: proxy.ServicePortInfo{ClusterIP: clusterIP, Port: 80, Protocol: v1.ProtocolTCP},
			want: []vsKey{makeVSKey(ipvs.TCP, clusterIP, 80)}},
		{name: "own ClusterIP as external IP", info: proxy.ServicePortInfo{ClusterIP: clusterIP, Port: 80, Protocol: v1.ProtocolTCP,
			External: &proxy.ServicePortExternal{ExternalIPs: []net.IP{clusterIP, net.ParseIP("192.0.2.7").To4()}}},
			want: []vsKey{makeVSKey(ipvs.TCP, clusterIP, 80)}},
		{name: "unusable ClusterIP", info: proxy.ServicePortInfo{ClusterIP: net.ParseIP("127.0.0.1").To4(), Port: 80, Protocol: v1.ProtocolTCP}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			info := tc.info
			st := buildServiceState(bc, []servicePort{{name: name, info: &info}})
			if got := st.clusterKeys(); !slices.Equal(got, tc.want) {
				t.Errorf("clusterKeys() = %v, want %v", got, tc.want)
			}
			p := &Proxier{inputs: newInputs()}
			p.svcPorts[name.NamespacedName] = []proxy.ServicePort{{Name: *name, Info: &info}}
			if got := p.clusterKeysOf(name.NamespacedName); !slices.Equal(got, tc.want) {
				t.Errorf("clusterKeysOf() = %v, want %v", got, tc.want)
			}
		})
	}
}
