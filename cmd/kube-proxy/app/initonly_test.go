package app

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/utils/ptr"

	proxyconfigapi "github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/apis/config"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/ipvs"
)

// TestInitOnlyWritesEverySysctl: --init-only makes every kernel write the
// daemon makes (conntrack, then ip_vs loaded and the ipvs mode's sysctls and
// timeouts), so that the main container needs CAP_NET_ADMIN only.
func TestInitOnlyWritesEverySysctl(t *testing.T) {
	for _, tc := range []struct {
		name      string
		kernel    string
		strictARP bool
		timeouts  bool
		want      []string
	}{
		{
			name: "current kernel, defaults",
			// 6.1: conn_reuse_mode stays as the kernel has it (only 4.1-5.8 get 0).
			kernel: "6.1.0",
			want:   []string{"net/ipv4/vs/conntrack=1", "net/ipv4/vs/expire_nodest_conn=1", "net/ipv4/vs/expire_quiescent_template=1", "net/ipv4/ip_forward=1"},
		},
		{
			name:      "5.4 kernel with strict ARP and IPVS timeouts",
			kernel:    "5.4.0",
			strictARP: true,
			timeouts:  true,
			want: []string{"net/ipv4/vs/conntrack=1", "net/ipv4/vs/expire_nodest_conn=1", "net/ipv4/vs/expire_quiescent_template=1", "net/ipv4/ip_forward=1",
				"net/ipv4/vs/conn_reuse_mode=0", "net/ipv4/conf/all/arp_ignore=1", "net/ipv4/conf/all/arp_announce=2"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k, sc := testKernel(t, 1<<20)
			var loaded []string
			k.loadModule = func(_ context.Context, name string) error {
				loaded = append(loaded, name)
				return nil
			}
			cfg := proxyconfigapi.NewDefaultConfiguration()
			cfg.Conntrack.MaxPerCore = ptr.To[int32](0) // keep the conntrack part to the two timeouts
			cfg.IPVS.StrictARP = tc.strictARP
			if tc.timeouts {
				cfg.IPVS.TCPTimeout.Duration = 900 * time.Second
				cfg.IPVS.UDPTimeout.Duration = 30 * time.Second
			}
			fakeIPVS := ipvs.NewFake()
			s := &ProxyServer{Config: cfg, deps: deps{kernel: k}}
			err := s.runInitOnly(context.Background(), initOnlyKernel{
				openIPVS:      func() (ipvs.Interface, error) { return fakeIPVS, nil },
				kernelVersion: func() (string, error) { return tc.kernel, nil },
			})
			if err != nil {
				t.Fatal(err)
			}
			want := append([]string{sysctlTCPEstablishedTimeout + "=86400", sysctlTCPCloseWaitTimeout + "=3600"}, tc.want...)
			if diff := cmp.Diff(want, sc.writes); diff != "" {
				t.Errorf("sysctl writes (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff([]string{"ip_vs"}, loaded); diff != "" {
				t.Errorf("modules loaded (-want +got):\n%s", diff)
			}
			tcp, _, udp := fakeIPVS.Timeouts()
			if tc.timeouts && (tcp != 900*time.Second || udp != 30*time.Second) {
				t.Errorf("IPVS timeouts tcp %v udp %v, want 15m0s and 30s", tcp, udp)
			}
		})
	}
}
