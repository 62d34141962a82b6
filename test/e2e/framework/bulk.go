package framework

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// BulkClient is an admin client whose client-side rate limit does not get in
// the way of writing thousands of objects (the default is QPS 50, Burst 100).
func (cp *ControlPlane) BulkClient() (kubernetes.Interface, error) {
	cfg := rest.CopyConfig(cp.RestConfig)
	cfg.QPS, cfg.Burst = 500, 1000
	return kubernetes.NewForConfig(cfg)
}

// BulkService is one Service BulkCreate wrote, with its EndpointSlice as the
// apiserver returned it (ready for an Update without a Get).
type BulkService struct {
	Service *corev1.Service
	Slice   *discoveryv1.EndpointSlice
}

// VIP is the ClusterIP:port of the Service's first port, as ipvsadm -Ln
// prints a virtual server.
func (b BulkService) VIP() string {
	return fmt.Sprintf("%s:%d", b.Service.Spec.ClusterIP, b.Service.Spec.Ports[0].Port)
}

// BulkCreate creates n ClusterIP Services (name prefix-<i>, one TCP port 80)
// in ns, each with one EndpointSlice holding the endpoints eps(i) returns,
// using workers goroutines. The result is indexed by i.
func BulkCreate(ctx context.Context, c kubernetes.Interface, ns, prefix string, n, workers int, eps func(i int) []Endpoint) ([]BulkService, error) {
	out := make([]BulkService, n)
	jobs := make(chan int)
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				svc, err := CreateService(cctx, c, ns, fmt.Sprintf("%s-%d", prefix, i), corev1.ServiceTypeClusterIP,
					ServicePort{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80})
				if err == nil {
					out[i].Service = svc
					out[i].Slice, err = CreateEndpointSlice(cctx, c, svc, eps(i)...)
				}
				if err != nil {
					errs <- err
					cancel()
					return
				}
			}
		}()
	}
feed:
	for i := 0; i < n; i++ {
		select {
		case jobs <- i:
		case <-cctx.Done():
			break feed
		}
	}
	close(jobs)
	wg.Wait()
	select {
	case err := <-errs:
		return nil, err
	default:
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// BulkDelete deletes every Service and EndpointSlice of ns (there is no
// namespace controller to do it when the namespace goes).
func BulkDelete(ctx context.Context, c kubernetes.Interface, ns string, workers int) error {
	if err := c.DiscoveryV1().EndpointSlices(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		return fmt.Errorf("deleting the EndpointSlices of %s: %w", ns, err)
	}
	list, err := c.CoreV1().Services(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing the Services of %s: %w", ns, err)
	}
	names := make(chan string)
	var mu sync.Mutex
	var first error
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for name := range names {
				if err := c.CoreV1().Services(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
					mu.Lock()
					if first == nil {
						first = fmt.Errorf("deleting Service %s/%s: %w", ns, name, err)
					}
					mu.Unlock()
				}
			}
		}()
	}
	for _, s := range list.Items {
		names <- s.Name
	}
	close(names)
	wg.Wait()
	return first
}

// IPVSTable is `ipvsadm -Ln` parsed: virtual server ("TCP 10.96.0.10:80")
// -> its real servers ("10.244.0.21:8080 Masq 1", sorted).
type IPVSTable map[string][]string

// ParseIPVSTable parses the output of `ipvsadm -Ln`.
func ParseIPVSTable(out string) IPVSTable {
	t := IPVSTable{}
	vs := ""
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) >= 2 && (f[0] == "TCP" || f[0] == "UDP" || f[0] == "SCTP"):
			vs = f[0] + " " + f[1]
			if t[vs] == nil {
				t[vs] = []string{}
			}
		case len(f) >= 4 && f[0] == "->" && f[1] != "RemoteAddress:Port" && vs != "":
			t[vs] = append(t[vs], f[1]+" "+f[2]+" "+f[3])
		}
	}
	for _, rs := range t {
		sort.Strings(rs)
	}
	return t
}

// HistogramSummary returns the _count and _sum of a Prometheus histogram in a
// /metrics text page (summed over its label sets); ok is false when absent.
func HistogramSummary(page, name string) (count, sum float64, ok bool) {
	return HistogramSummaryOf(page, name, "")
}

// HistogramSummaryOf is HistogramSummary over the label sets that contain label
// (e.g. `ip_family="IPv6"`); "" takes them all.
func HistogramSummaryOf(page, name, label string) (count, sum float64, ok bool) {
	for _, line := range strings.Split(page, "\n") {
		f := strings.Fields(line)
		if len(f) != 2 {
			continue
		}
		metric := f[0]
		if i := strings.IndexByte(metric, '{'); i >= 0 {
			if label != "" && !strings.Contains(metric[i:], label) {
				continue
			}
			metric = metric[:i]
		} else if label != "" {
			continue
		}
		v, err := strconv.ParseFloat(f[1], 64)
		if err != nil {
			continue
		}
		switch metric {
		case name + "_count":
			count += v
			ok = true
		case name + "_sum":
			sum += v
		}
	}
	return count, sum, ok
}
