package framework

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
)

// seedLine is one input line of etcd-seed (test/e2e/tools/cmd/etcd-seed):
// the Service and its EndpointSlice as BulkCreate would send them to Create.
type seedLine struct {
	Service *corev1.Service            `json:"service"`
	Slice   *discoveryv1.EndpointSlice `json:"slice"`
}

// seedChunk is how many Services BulkSeed writes per round of etcd-seed's
// two phases: few enough that each IPAddress meets its Service well within
// the 60 s after which the apiserver's repair loop deletes an IPAddress whose
// Service it has not seen.
const seedChunk = 5000

// BulkSeed puts in place what BulkCreate creates (n ClusterIP Services
// prefix-<i> with one TCP port 80 "http" targeting 8080, each with one
// EndpointSlice holding eps(i)) without going through the apiserver's create
// path: kube-apiserver v1.37's ClusterIP allocator lists every IPAddress on
// each allocation, so creating N Services that way costs O(N^2) (about 1,000 a
// minute past 15,000). The etcd-seed tool (built by test/e2e/lib/build-tools.sh)
// writes the Services, their slices and the IPAddress objects of their
// ClusterIPs straight into cp's etcd, encoded as the apiserver stores them,
// while the apiserver runs: its watch cache and informers see the keys as if
// created through it.
//
// The objects are the ones BulkCreate sends (newService, newEndpointSlice),
// built here and passed to the tool as JSON lines on its stdin, so any eps
// works; the tool adds what the apiserver adds (defaults, uid,
// creationTimestamp, ClusterIP, the slice's generation). Per seedChunk
// Services it writes the IPAddresses, waits until the apiserver lists them,
// writes the Services and slices and waits until it lists those: the
// allocator's order (the apiserver's ClusterIP repair loop reports a Service
// whose IPAddress its informer has not seen yet), and no chunk starts before
// the apiserver has taken in the last, so that its informers do not fall
// behind (the repair loop deletes an IPAddress whose Service it has not seen
// 60 s after the IPAddress's creation; it writes it again when it sees the
// Service). At the end it lists Services and slices through c (paginated)
// with the ClusterIPs the tool chose. The namespace must exist or is written
// by the tool. The result is indexed by i, with the objects as the apiserver
// returns them (ready for an Update without a Get).
func BulkSeed(ctx context.Context, cp *ControlPlane, c kubernetes.Interface, ns, prefix string, n int, eps func(i int) []Endpoint) ([]BulkService, error) {
	if cp.EtcdURL == "" || cp.BinDir == "" {
		return nil, fmt.Errorf("BulkSeed needs a control plane started by StartControlPlane (its etcd URL and tools folder)")
	}
	start := time.Now()
	base, err := countSeedable(ctx, c, ns)
	if err != nil {
		return nil, err
	}
	ips := make(map[string]string, n)
	for lo := 0; lo < n; lo += seedChunk {
		hi := min(n, lo+seedChunk)
		got, err := runSeed(ctx, cp, "ipaddresses", ns, lo, hi, func(i int) seedLine { return seedLineFor(ns, prefix, i, "", nil) })
		if err != nil {
			return nil, err
		}
		if err := waitListed(ctx, c, ns, seedCounts{ipAddresses: base.ipAddresses + hi}); err != nil {
			return nil, err
		}
		if _, err := runSeed(ctx, cp, "objects", ns, lo, hi, func(i int) seedLine {
			name := fmt.Sprintf("%s-%d", prefix, i)
			return seedLineFor(ns, prefix, i, got[name], eps(i))
		}); err != nil {
			return nil, err
		}
		if err := waitListed(ctx, c, ns, seedCounts{base.ipAddresses + hi, base.services + hi, base.slices + hi}); err != nil {
			return nil, err
		}
		maps.Copy(ips, got)
	}
	wrote := time.Since(start)
	out, err := listSeeded(ctx, c, ns, prefix, n, ips, 2*time.Minute)
	if err != nil {
		return nil, err
	}
	if cp.logf != nil {
		cp.logf("seeded %d Services and EndpointSlices into etcd and the apiserver listed them in %s, returned in %s",
			n, wrote.Round(time.Millisecond), (time.Since(start) - wrote).Round(time.Millisecond))
	}
	return out, nil
}

// seedCounts is how many IPAddresses (all) and Services and EndpointSlices
// (in a namespace) the apiserver lists.
type seedCounts struct{ ipAddresses, services, slices int }

// countSeedable counts them, each with a list of one item and its remaining
// count, which spares listing 100,000 objects.
func countSeedable(ctx context.Context, c kubernetes.Interface, ns string) (seedCounts, error) {
	var n seedCounts
	var err error
	one := metav1.ListOptions{Limit: 1}
	if n.ipAddresses, err = countList(c.NetworkingV1().IPAddresses().List(ctx, one)); err != nil {
		return n, err
	}
	if n.services, err = countList(c.CoreV1().Services(ns).List(ctx, one)); err != nil {
		return n, err
	}
	n.slices, err = countList(c.DiscoveryV1().EndpointSlices(ns).List(ctx, one))
	return n, err
}

// waitListed waits until the apiserver lists at least want of each.
func waitListed(ctx context.Context, c kubernetes.Interface, ns string, want seedCounts) error {
	err := Eventually(ctx, 5*time.Minute, 200*time.Millisecond, func(ctx context.Context) error {
		have, err := countSeedable(ctx, c, ns)
		if err == nil && (have.ipAddresses < want.ipAddresses || have.services < want.services || have.slices < want.slices) {
			err = fmt.Errorf("the apiserver lists %d IPAddresses, %d Services and %d EndpointSlices in %s, want %d, %d, %d",
				have.ipAddresses, have.services, have.slices, ns, want.ipAddresses, want.services, want.slices)
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("waiting for the seeded objects: %w", err)
	}
	return nil
}

// seedLineFor is Service i as BulkCreate sends it, with clusterIP set (the
// objects phase) and its slice holding eps if not nil.
func seedLineFor(ns, prefix string, i int, clusterIP string, eps []Endpoint) seedLine {
	svc := newService(ns, fmt.Sprintf("%s-%d", prefix, i), corev1.ServiceTypeClusterIP,
		ServicePort{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80})
	line := seedLine{Service: svc}
	if eps != nil {
		line.Slice = newEndpointSlice(svc, discoveryv1.AddressTypeIPv4, eps...)
	}
	svc.Spec.ClusterIP = clusterIP
	return line
}

// runSeed runs etcd-seed's phase on lines lo..hi-1 and returns the ClusterIP
// of each Service, by name.
func runSeed(ctx context.Context, cp *ControlPlane, phase, ns string, lo, hi int, line func(i int) seedLine) (map[string]string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(cp.BinDir, "etcd-seed"), "-phase", phase,
		"-etcd", cp.EtcdURL, "-namespace", ns, "-service-cidr", ServiceRangeIPv4())
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting etcd-seed: %w", err)
	}
	written := make(chan error, 1)
	go func() {
		w := bufio.NewWriterSize(stdin, 1<<20)
		enc := json.NewEncoder(w)
		var err error
		for i := lo; i < hi && err == nil; i++ {
			err = enc.Encode(line(i))
		}
		if err == nil {
			err = w.Flush()
		}
		written <- errors.Join(err, stdin.Close())
	}()
	werr := cmd.Wait()
	if err := errors.Join(werr, <-written); err != nil {
		return nil, fmt.Errorf("etcd-seed: %w\n%s", err, stderr.String())
	}
	if cp.logf != nil {
		cp.logf("%s", strings.TrimSpace(stderr.String()))
	}
	ips := make(map[string]string, hi-lo)
	for _, line := range strings.Split(strings.TrimSpace(stdout.String()), "\n") {
		if name, ip, ok := strings.Cut(line, " "); ok {
			ips[name] = ip
		}
	}
	if len(ips) != hi-lo {
		return nil, fmt.Errorf("etcd-seed reported %d ClusterIPs for %d Services", len(ips), hi-lo)
	}
	return ips, nil
}

// listSeeded lists every seeded Service (with the ClusterIP etcd-seed gave
// it) and its slice, and returns them indexed by i; it retries for a while
// (the counts BulkSeed waited for may include other objects).
func listSeeded(ctx context.Context, c kubernetes.Interface, ns, prefix string, n int, ips map[string]string, timeout time.Duration) ([]BulkService, error) {
	var out []BulkService
	err := Eventually(ctx, timeout, time.Second, func(ctx context.Context) error {
		var err error
		out, err = collectSeeded(ctx, c, ns, prefix, n, ips)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("waiting for the apiserver to list the seeded objects: %w", err)
	}
	return out, nil
}

// countList is the number of items a list with Limit 1 reports: its item
// and the remaining count.
func countList[L interface {
	runtime.Object
	metav1.ListInterface
}](l L, err error) (int, error) {
	if err != nil {
		return 0, err
	}
	n := meta.LenList(l)
	if r := l.GetRemainingItemCount(); r != nil {
		n += int(*r)
	}
	return n, nil
}

// seedIndex is i for the name prefix-<i> (i < n), -1 for another name.
func seedIndex(name, prefix string, n int) int {
	s, ok := strings.CutPrefix(name, prefix+"-")
	if !ok {
		return -1
	}
	i, err := strconv.Atoi(s)
	if err != nil || i < 0 || i >= n || strconv.Itoa(i) != s {
		return -1
	}
	return i
}

// collectSeeded lists the Services and slices of ns page by page and fills
// the result; an error names what is still missing.
func collectSeeded(ctx context.Context, c kubernetes.Interface, ns, prefix string, n int, ips map[string]string) ([]BulkService, error) {
	out := make([]BulkService, n)
	services, slices := 0, 0
	for cont := ""; ; {
		l, err := c.CoreV1().Services(ns).List(ctx, metav1.ListOptions{Limit: 5000, Continue: cont})
		if err != nil {
			return nil, err
		}
		for k := range l.Items {
			svc := &l.Items[k]
			if i := seedIndex(svc.Name, prefix, n); i >= 0 && out[i].Service == nil {
				if svc.Spec.ClusterIP != ips[svc.Name] {
					return nil, StopTrying(fmt.Errorf("service %s/%s has ClusterIP %s, etcd-seed wrote %s", ns, svc.Name, svc.Spec.ClusterIP, ips[svc.Name]))
				}
				out[i].Service = svc
				services++
			}
		}
		if cont = l.Continue; cont == "" {
			break
		}
	}
	for cont := ""; ; {
		l, err := c.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{Limit: 5000, Continue: cont})
		if err != nil {
			return nil, err
		}
		for k := range l.Items {
			sl := &l.Items[k]
			svcName := sl.Labels[discoveryv1.LabelServiceName]
			if i := seedIndex(svcName, prefix, n); i >= 0 && sl.Name == svcName+"-e2e" && out[i].Slice == nil {
				out[i].Slice = sl
				slices++
			}
		}
		if cont = l.Continue; cont == "" {
			break
		}
	}
	if services < n || slices < n {
		return nil, fmt.Errorf("the apiserver lists %d of the %d seeded Services and %d of their EndpointSlices in %s", services, n, slices, ns)
	}
	return out, nil
}
