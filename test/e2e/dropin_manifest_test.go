//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"k8s.io/utils/ptr"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/test/e2e/framework"
)

// readManifest decodes every object of a YAML file of the repository.
func readManifest(t *testing.T, rel string) []*unstructured.Unstructured {
	t.Helper()
	f, err := os.Open(filepath.Join(repoRoot, rel))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var objs []*unstructured.Unstructured
	dec := yaml.NewYAMLOrJSONDecoder(f, 4096)
	for {
		obj := &unstructured.Unstructured{}
		if err := dec.Decode(&obj.Object); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("%s: %v", rel, err)
		}
		if len(obj.Object) > 0 {
			objs = append(objs, obj)
		}
	}
	return objs
}

// applyObjects applies objs to the apiserver for real with server-side apply
// (force: what `kubectl apply --server-side --force-conflicts` does).
func applyObjects(t *testing.T, ctx context.Context, manager string, objs []*unstructured.Unstructured) {
	t.Helper()
	disc, err := discovery.NewDiscoveryClientForConfig(cp.RestConfig)
	if err != nil {
		t.Fatal(err)
	}
	groups, err := restmapper.GetAPIGroupResources(disc)
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDiscoveryRESTMapper(groups)
	dyn, err := dynamic.NewForConfig(cp.RestConfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, obj := range objs {
		gvk := obj.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			t.Fatalf("%s %s: %v", gvk.Kind, obj.GetName(), err)
		}
		var ri dynamic.ResourceInterface = dyn.Resource(m.Resource)
		if m.Scope.Name() == meta.RESTScopeNameNamespace {
			ri = dyn.Resource(m.Resource).Namespace(obj.GetNamespace())
		}
		if _, err := ri.Apply(ctx, obj.GetName(), obj, metav1.ApplyOptions{FieldManager: manager, Force: true}); err != nil {
			t.Fatalf("applying %s %s/%s: %v", gvk.Kind, obj.GetNamespace(), obj.GetName(), err)
		}
	}
}

// expandVars is the kubelet's $(VAR) expansion of command and args: $(NAME)
// becomes the variable's value when it is defined and stays as it is
// otherwise; $$ is a literal $.
func expandVars(s string, env map[string]string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 >= len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch {
		case s[i+1] == '$':
			b.WriteByte('$')
			i++
		case s[i+1] == '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 {
				b.WriteString(s[i:])
				return b.String()
			}
			name := s[i+2 : i+2+end]
			if v, ok := env[name]; ok {
				b.WriteString(v)
			} else {
				b.WriteString(s[i : i+3+end])
			}
			i += 2 + end
		default:
			b.WriteByte(s[i])
		}
	}
	return b.String()
}

func TestExpandVars(t *testing.T) {
	env := map[string]string{"NODE_NAME": "kpi-node", "A": "x"}
	for in, want := range map[string]string{
		"--hostname-override=$(NODE_NAME)": "--hostname-override=kpi-node",
		"$(A)$(A)-$(UNSET)":                "xx-$(UNSET)",
		"$$(A) costs $5":                   "$(A) costs $5",
	} {
		if got := expandVars(in, env); got != want {
			t.Errorf("expandVars(%q) = %q, want %q", in, got, want)
		}
	}
}

// podRun is a DaemonSet's pod started in the VM the way the kubelet starts it.
type podRun struct {
	pid     int
	logPath string
	argv    []string
}

// startAsKubelet starts the one container of the DaemonSet ns/name, read back
// from the apiserver, in the VM as the kubelet would on a hostNetwork pod:
// every key of a configMap volume as a file at its mount path, hostPath
// volumes checked or created per their type, the service account's token
// (TokenRequest), ca.crt and namespace at
// /var/run/secrets/kubernetes.io/serviceaccount, env from values, ConfigMap
// keys and spec.nodeName, $(VAR) expanded in command and args. When the VM has
// the image root filesystem (the default), the container runs from it
// (chrooted, its own mount namespace) with the volumes bind-mounted at their
// mount paths, as a runtime would; without it, in the VM's root with our
// binary copied to the command's path.
func startAsKubelet(t *testing.T, ctx context.Context, ns, name string) (*podRun, *appsv1.DaemonSet) {
	t.Helper()
	ds, err := cp.Client.AppsV1().DaemonSets(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	spec := ds.Spec.Template.Spec
	if !spec.HostNetwork {
		t.Fatalf("DaemonSet %s/%s is not hostNetwork: this harness runs it in the node's namespace", ns, name)
	}
	if len(spec.Containers) != 1 || len(spec.InitContainers) != 0 {
		t.Fatalf("DaemonSet %s/%s: %d containers, %d init containers; the harness runs one container", ns, name, len(spec.Containers), len(spec.InitContainers))
	}
	c := spec.Containers[0]
	configMap := func(cmName string) *corev1.ConfigMap {
		cm, err := cp.Client.CoreV1().ConfigMaps(ns).Get(ctx, cmName, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("ConfigMap %s/%s the pod needs: %v", ns, cmName, err)
		}
		return cm
	}
	volumes := map[string]corev1.Volume{}
	for _, v := range spec.Volumes {
		volumes[v.Name] = v
	}
	// In the image the kubelet's files live in a folder of the node,
	// bind-mounted at the container's path; otherwise at that path directly.
	image := vm.Image()
	var mounts []framework.ImageMount
	filesAt := func(containerPath string) string {
		if image == nil {
			return containerPath
		}
		staged := filepath.Join("/kpi/pods", ns, name, containerPath)
		mounts = append(mounts, framework.ImageMount{Source: staged, Path: containerPath, ReadOnly: true})
		return staged
	}
	for _, m := range c.VolumeMounts {
		v, ok := volumes[m.Name]
		switch {
		case !ok:
			t.Fatalf("mount %s: no volume %q", m.MountPath, m.Name)
		case v.ConfigMap != nil:
			dir := filesAt(m.MountPath)
			guest(t, ctx, "mkdir -p "+dir)
			for key, data := range configMap(v.ConfigMap.Name).Data {
				if err := vm.WriteFile(ctx, filepath.Join(dir, key), []byte(data), 0o644); err != nil {
					t.Fatal(err)
				}
			}
		case v.HostPath != nil:
			typ := ptr.Deref(v.HostPath.Type, corev1.HostPathUnset)
			switch typ {
			case corev1.HostPathFileOrCreate:
				guest(t, ctx, fmt.Sprintf("mkdir -p %s && touch %s", filepath.Dir(v.HostPath.Path), v.HostPath.Path))
			case corev1.HostPathDirectory:
				guest(t, ctx, "test -d "+v.HostPath.Path)
			case corev1.HostPathUnset:
			default:
				t.Fatalf("hostPath type %s not handled by the harness", typ)
			}
			if image != nil {
				mounts = append(mounts, framework.ImageMount{Source: v.HostPath.Path, Path: m.MountPath, ReadOnly: m.ReadOnly})
			} else if v.HostPath.Path != m.MountPath {
				t.Fatalf("hostPath %s mounted at %s: without the image the harness runs without a mount namespace", v.HostPath.Path, m.MountPath)
			}
		default:
			t.Fatalf("volume %q: type not handled by the harness", m.Name)
		}
	}
	if ptr.Deref(spec.AutomountServiceAccountToken, true) {
		tr, err := cp.Client.CoreV1().ServiceAccounts(ns).CreateToken(ctx, spec.ServiceAccountName, &authenticationv1.TokenRequest{
			Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("token for service account %s/%s: %v", ns, spec.ServiceAccountName, err)
		}
		dir := filesAt("/var/run/secrets/kubernetes.io/serviceaccount")
		for file, data := range map[string][]byte{"token": []byte(tr.Status.Token), "ca.crt": cp.CAPEM, "namespace": []byte(ns)} {
			if err := vm.WriteFile(ctx, filepath.Join(dir, file), data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	env := map[string]string{}
	envList := []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	for _, e := range c.Env {
		val := e.Value
		switch {
		case e.ValueFrom == nil:
		case e.ValueFrom.ConfigMapKeyRef != nil:
			ref := e.ValueFrom.ConfigMapKeyRef
			v, ok := configMap(ref.Name).Data[ref.Key]
			if !ok {
				t.Fatalf("env %s: ConfigMap %s has no key %s", e.Name, ref.Name, ref.Key)
			}
			val = v
		case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "spec.nodeName":
			val = framework.NodeName
		default:
			t.Fatalf("env %s: source not handled by the harness", e.Name)
		}
		val = expandVars(val, env)
		env[e.Name] = val
		envList = append(envList, e.Name+"="+val)
	}
	var argv []string
	for _, a := range append(append([]string{}, c.Command...), c.Args...) {
		argv = append(argv, expandVars(a, env))
	}
	run := argv
	if image != nil {
		// The image has our binary where the Dockerfile's COPY puts it; a
		// command naming another path fails as it would on a node.
		run = vm.InImage(mounts, argv...)
	} else {
		guest(t, ctx, fmt.Sprintf("mkdir -p %s && cp /kpi/bin/kube-proxy %s", filepath.Dir(argv[0]), argv[0]))
	}
	r := &podRun{logPath: "/kpi/logs/" + name + ".log", argv: argv}
	guest(t, ctx, "mkdir -p /kpi/logs")
	pid, err := vm.Start(ctx, r.logPath, append(append([]string{"env", "-i"}, envList...), run...)...)
	if err != nil {
		t.Fatal(err)
	}
	r.pid = pid
	t.Logf("started %s/%s as the kubelet would: %q (env %q, image mounts %v)", ns, name, argv, envList, mounts)
	t.Cleanup(func() {
		ctx := context.Background()
		if err := vm.Signal(ctx, r.pid, syscall.SIGTERM); err == nil {
			_ = framework.Eventually(ctx, 20*time.Second, 500*time.Millisecond, func(ctx context.Context) error {
				if out, _ := vm.Sh(ctx, fmt.Sprintf("test -d /proc/%d && ! grep -q '^State:.*Z' /proc/%d/status && echo running", r.pid, r.pid)); strings.TrimSpace(out) == "running" {
					return fmt.Errorf("still running")
				}
				return nil
			})
		}
	})
	return r, ds
}

func (r *podRun) running(ctx context.Context) bool {
	out, _ := vm.Sh(ctx, fmt.Sprintf("test -d /proc/%d && ! grep -q '^State:.*Z' /proc/%d/status && echo running", r.pid, r.pid))
	return strings.TrimSpace(out) == "running"
}

func (r *podRun) logTail(ctx context.Context, n int) string {
	out, _ := vm.Sh(ctx, fmt.Sprintf("tail -n %d %s", n, r.logPath))
	return out
}

// probe runs one HTTP probe the way the kubelet does for a hostNetwork pod:
// GET http://NODE-IP:PORT/PATH within timeoutSeconds; 200-399 passes.
func probe(ctx context.Context, p *corev1.Probe) bool {
	if p == nil || p.HTTPGet == nil {
		return true
	}
	timeout := max(p.TimeoutSeconds, 1)
	url := fmt.Sprintf("http://%s:%s%s", framework.NodeIP, p.HTTPGet.Port.String(), p.HTTPGet.Path)
	// busybox wget exits non-zero on any status >= 400.
	_, err := vm.Sh(ctx, fmt.Sprintf("timeout %d wget -q -O /dev/null %s", timeout, url))
	return err == nil
}

// probeLikeKubelet polls the container's readiness and liveness probes on
// their own schedules (initialDelaySeconds, periodSeconds) for window, and
// fails t as soon as liveness fails failureThreshold times in a row (the
// kubelet would restart the container). It returns the time of the first
// passing readiness probe (zero if none) and how many probes of each kind ran.
func probeLikeKubelet(t *testing.T, ctx context.Context, r *podRun, c corev1.Container, window time.Duration, done func(context.Context) bool) time.Time {
	t.Helper()
	start := time.Now()
	next := map[string]time.Time{}
	probes := map[string]*corev1.Probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe}
	var ready time.Time
	for kind, p := range probes {
		if p == nil {
			// The kubelet: no readiness probe means ready once running, no
			// liveness probe means never restarted (kubeadm's DaemonSet has none).
			delete(probes, kind)
			if kind == "readiness" {
				ready = start
			}
			t.Logf("the container has no %s probe", kind)
			continue
		}
		next[kind] = start.Add(time.Duration(p.InitialDelaySeconds) * time.Second)
	}
	livenessFailures, runs := 0, map[string]int{}
	for time.Since(start) < window {
		if !r.running(ctx) {
			t.Fatalf("the daemon exited %s after start; log tail:\n%s", time.Since(start).Round(time.Second), r.logTail(ctx, 40))
		}
		for _, kind := range []string{"readiness", "liveness"} {
			p, has := probes[kind]
			if !has || time.Now().Before(next[kind]) {
				continue
			}
			next[kind] = time.Now().Add(time.Duration(max(p.PeriodSeconds, 1)) * time.Second)
			ok := probe(ctx, p)
			runs[kind]++
			switch {
			case kind == "readiness" && ok && ready.IsZero():
				ready = time.Now()
				t.Logf("readiness probe %s passed %.1f s after start", p.HTTPGet.Path, ready.Sub(start).Seconds())
			case kind == "liveness" && ok:
				livenessFailures = 0
			case kind == "liveness":
				livenessFailures++
				t.Logf("liveness probe %s failed (%d in a row, threshold %d)", p.HTTPGet.Path, livenessFailures, max(p.FailureThreshold, 1))
				if livenessFailures >= int(max(p.FailureThreshold, 1)) {
					t.Fatalf("the kubelet would restart the container: liveness failed %d times in a row; log tail:\n%s", livenessFailures, r.logTail(ctx, 40))
				}
			}
		}
		if !ready.IsZero() && (probes["liveness"] == nil || runs["liveness"] >= 2) && done(ctx) {
			t.Logf("probes: %d readiness, %d liveness in %.0f s", runs["readiness"], runs["liveness"], time.Since(start).Seconds())
			return ready
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Fatalf("after %s: ready=%v, %d readiness and %d liveness probes, done=%v; log tail:\n%s", window, !ready.IsZero(), runs["readiness"], runs["liveness"], done(ctx), r.logTail(ctx, 40))
	return ready
}

// ensureKubernetesEndpoints gives the `kubernetes` Service the apiserver's
// address as the VM reaches it (the e2e apiserver runs without an endpoint
// reconciler); it returns the Service's ClusterIP and a cleanup.
func ensureKubernetesEndpoints(t *testing.T, ctx context.Context) string {
	t.Helper()
	svc, err := cp.Client.CoreV1().Services("default").Get(ctx, "kubernetes", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name: "kubernetes-e2e", Namespace: "default",
			Labels: map[string]string{discoveryv1.LabelServiceName: "kubernetes", discoveryv1.LabelManagedBy: "e2e"},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.0.2.100"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("https"), Port: ptr.To[int32](6443), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
	if _, err := cp.Client.DiscoveryV1().EndpointSlices("default").Create(ctx, slice, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cp.Client.DiscoveryV1().EndpointSlices("default").Delete(context.Background(), slice.Name, metav1.DeleteOptions{})
	})
	return svc.Spec.ClusterIP
}

// runManifestOnBareNode is the scenario both install methods share: a node
// with no kube-proxy state (so the `kubernetes` Service's ClusterIP leads
// nowhere), the DaemonSet ns/name started from what the apiserver holds, its
// probes polled as the kubelet would: it must become ready, never fail
// liveness, program the `kubernetes` Service (a connection through the
// ClusterIP reaches the apiserver) and write its start-up Event on the Node
// with the RBAC the manifest grants.
func runManifestOnBareNode(t *testing.T, ctx context.Context, ns, name string) {
	t.Helper()
	pauseOurKubeProxy(t, ctx)
	runCleanup(t, ctx)
	vip := ensureKubernetesEndpoints(t, ctx)
	if out := guest(t, ctx, "ipvsadm -Ln | grep -c -F ' "+vip+":443 ' || true"); strings.TrimSpace(out) != "0" {
		t.Fatalf("the kubernetes Service %s:443 is programmed before the daemon starts", vip)
	}
	since := metav1.Now()
	r, ds := startAsKubelet(t, ctx, ns, name)
	programmed := func(ctx context.Context) bool {
		rs, err := node.RealServers(ctx, "TCP", vip+":443")
		return err == nil && len(rs) == 1 && strings.HasPrefix(rs[0], "10.0.2.100:6443 ")
	}
	ready := probeLikeKubelet(t, ctx, r, ds.Spec.Template.Spec.Containers[0], 240*time.Second, programmed)
	t.Logf("ready at %s; kubernetes Service %s:443 -> 10.0.2.100:6443 programmed", ready.Format("15:04:05.0"), vip)
	// Through the ClusterIP to the apiserver, from the node (TCP connect).
	if _, err := vm.Sh(ctx, fmt.Sprintf("timeout 10 bash -c 'exec 3<>/dev/tcp/%s/443'", vip)); err != nil {
		t.Errorf("no TCP connection through the kubernetes Service %s:443: %v", vip, err)
	}
	// The start-up Event, written with the manifest's RBAC.
	err := framework.Eventually(ctx, 30*time.Second, time.Second, func(ctx context.Context) error {
		evs, err := cp.Client.EventsV1().Events("").List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		for _, e := range evs.Items {
			if e.Regarding.Kind == "Node" && e.Regarding.Name == framework.NodeName && e.Reason == "Starting" && !e.CreationTimestamp.Before(&since) {
				return nil
			}
		}
		return fmt.Errorf("no Starting event on Node %s since %s", framework.NodeName, since.Format(time.RFC3339))
	})
	if err != nil {
		t.Error(err)
	}
	if log := r.logTail(ctx, 400); regexp.MustCompile(`(?i)forbidden`).MatchString(log) {
		t.Errorf("the daemon was refused something by RBAC:\n%s", log)
	}
}

// TestStandaloneManifestRunsAsWritten: deploy/standalone/kube-proxy-ipvs.yaml
// with its one value set (apiServer: https://10.0.2.100:6443, the address the
// node reaches the apiserver at) applied to the apiserver, then its DaemonSet
// run in the VM exactly as written (runManifestOnBareNode) with the token of
// its own kube-proxy-ipvs ServiceAccount.
func TestStandaloneManifestRunsAsWritten(t *testing.T) {
	defaultBackendOnly(t)
	dumpOnFailure(t)
	ctx := context.Background()
	objs := readManifest(t, "deploy/standalone/kube-proxy-ipvs.yaml")
	set := false
	for _, o := range objs {
		if o.GetKind() == "ConfigMap" {
			if err := unstructured.SetNestedField(o.Object, "https://"+framework.VMAPIServerAddress, "data", "apiServer"); err != nil {
				t.Fatal(err)
			}
			set = true
		}
	}
	if !set {
		t.Fatal("the standalone manifest has no ConfigMap with apiServer")
	}
	applyObjects(t, ctx, "e2e-standalone", objs)
	runManifestOnBareNode(t, ctx, "kube-system", "kube-proxy-ipvs")
}

// TestKubeadmMigrationManifestRunsAsWritten: kubeadm v1.37.2's kube-proxy addon
// (deploy/testdata, rendered by kubeadm's own code for an ipvs-mode cluster
// whose control-plane endpoint is the VM's apiserver address) applied to the
// apiserver, then deploy/kubeadm/image-patch.yaml applied as `kubectl patch`
// does (a strategic merge patch): only the image changes, kubeadm's
// ConfigMap, ServiceAccount and bindings are untouched, and the DaemonSet so
// patched runs as written (runManifestOnBareNode) with kubeadm's config.conf,
// kubeconfig.conf and the kube-proxy ServiceAccount's system:node-proxier
// binding.
func TestKubeadmMigrationManifestRunsAsWritten(t *testing.T) {
	defaultBackendOnly(t)
	dumpOnFailure(t)
	ctx := context.Background()
	applyObjects(t, ctx, "kubeadm", readManifest(t, "deploy/testdata/kubeadm-v1.37.2-addon-kube-proxy.yaml"))
	before, err := cp.Client.AppsV1().DaemonSets("kube-system").Get(ctx, "kube-proxy", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cmBefore, err := cp.Client.CoreV1().ConfigMaps("kube-system").Get(ctx, "kube-proxy", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	patchYAML, err := os.ReadFile(filepath.Join(repoRoot, "deploy/kubeadm/image-patch.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	patch, err := yaml.ToJSON(patchYAML)
	if err != nil {
		t.Fatal(err)
	}
	after, err := cp.Client.AppsV1().DaemonSets("kube-system").Patch(ctx, "kube-proxy", types.StrategicMergePatchType, patch, metav1.PatchOptions{FieldManager: "kubectl-patch"})
	if err != nil {
		t.Fatal(err)
	}
	want := before.Spec.DeepCopy()
	want.Template.Spec.Containers[0].Image = after.Spec.Template.Spec.Containers[0].Image
	if after.Spec.Template.Spec.Containers[0].Image == before.Spec.Template.Spec.Containers[0].Image {
		t.Fatalf("the patch left the image at %s", before.Spec.Template.Spec.Containers[0].Image)
	}
	if !equality.Semantic.DeepEqual(*want, after.Spec) {
		t.Fatalf("the patch changed more than the image:\nbefore %+v\nafter  %+v", before.Spec, after.Spec)
	}
	cmAfter, err := cp.Client.CoreV1().ConfigMaps("kube-system").Get(ctx, "kube-proxy", metav1.GetOptions{})
	if err != nil || cmAfter.ResourceVersion != cmBefore.ResourceVersion {
		t.Fatalf("kubeadm's ConfigMap changed (resourceVersion %s -> %s, %v)", cmBefore.ResourceVersion, cmAfter.ResourceVersion, err)
	}
	runManifestOnBareNode(t, ctx, "kube-system", "kube-proxy")
}
