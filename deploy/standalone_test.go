package deploy

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/component-base/featuregate"
	logsapi "k8s.io/component-base/logs/api/v1"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/cmd/kube-proxy/app"
	proxyconfigapi "github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/apis/config"
)

// decodeObjects strictly decodes every document of a YAML stream into the
// client-go API types: an unknown or misspelt field fails the test.
func decodeObjects(t *testing.T, name string, data []byte) []runtime.Object {
	t.Helper()
	decoder := serializer.NewCodecFactory(scheme.Scheme, serializer.EnableStrict).UniversalDeserializer()
	var objs []runtime.Object
	for i, doc := range bytes.Split(data, []byte("\n---\n")) {
		if onlyComments(doc) {
			continue
		}
		// The separator took the document's last newline; a block scalar
		// ("|", clip) ending the document needs it back.
		obj, _, err := decoder.Decode(append(doc, '\n'), nil, nil)
		if err != nil {
			t.Fatalf("%s: document %d: %v", name, i, err)
		}
		objs = append(objs, obj)
	}
	return objs
}

// standaloneManifest is the plain-YAML standalone install.
const standaloneManifest = "standalone/kube-proxy-ipvs.yaml"

func loadManifest(t *testing.T) []runtime.Object {
	t.Helper()
	data, err := os.ReadFile(standaloneManifest)
	if err != nil {
		t.Fatal(err)
	}
	return decodeObjects(t, standaloneManifest, data)
}

type manifest struct {
	sa      *v1.ServiceAccount
	role    *rbacv1.ClusterRole
	binding *rbacv1.ClusterRoleBinding
	cm      *v1.ConfigMap
	ds      *appsv1.DaemonSet
}

func parse(t *testing.T) manifest {
	return parseObjects(t, loadManifest(t))
}

func parseObjects(t *testing.T, objs []runtime.Object) manifest {
	t.Helper()
	var m manifest
	for _, obj := range objs {
		switch o := obj.(type) {
		case *v1.ServiceAccount:
			m.sa = o
		case *rbacv1.ClusterRole:
			m.role = o
		case *rbacv1.ClusterRoleBinding:
			m.binding = o
		case *v1.ConfigMap:
			m.cm = o
		case *appsv1.DaemonSet:
			m.ds = o
		default:
			t.Errorf("unexpected object %T", obj)
		}
	}
	if m.sa == nil || m.role == nil || m.binding == nil || m.cm == nil || m.ds == nil {
		t.Fatalf("manifest is missing objects: %+v", m)
	}
	return m
}

func TestRBACIsLeastPrivilege(t *testing.T) {
	m := parse(t)
	if m.sa.Name != "kube-proxy-ipvs" || m.sa.Namespace != "kube-system" {
		t.Errorf("service account %s/%s", m.sa.Namespace, m.sa.Name)
	}
	// Every (group, resource, verb) granted, flattened.
	got := map[string]bool{}
	for _, r := range m.role.Rules {
		if len(r.ResourceNames) > 0 || len(r.NonResourceURLs) > 0 {
			t.Errorf("unexpected rule shape %+v", r)
		}
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				for _, v := range r.Verbs {
					got[g+"/"+res+":"+v] = true
				}
			}
		}
	}
	want := map[string]bool{
		"/services:list": true, "/services:watch": true,
		"/nodes:list": true, "/nodes:watch": true, "/nodes:get": true,
		"discovery.k8s.io/endpointslices:list": true, "discovery.k8s.io/endpointslices:watch": true,
		"events.k8s.io/events:create": true, "events.k8s.io/events:patch": true, "events.k8s.io/events:update": true,
		"/events:create": true, "/events:patch": true, "/events:update": true,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ClusterRole grants (-want +got):\n%s", diff)
	}
	b := m.binding
	if b.RoleRef.Kind != "ClusterRole" || b.RoleRef.Name != m.role.Name || len(b.Subjects) != 1 ||
		b.Subjects[0].Kind != "ServiceAccount" || b.Subjects[0].Name != m.sa.Name || b.Subjects[0].Namespace != m.sa.Namespace {
		t.Errorf("binding does not bind the role to the service account: %+v", b)
	}
}

func TestDaemonSetShape(t *testing.T) {
	m := parse(t)
	ds := m.ds
	spec := ds.Spec.Template.Spec
	if ds.Namespace != "kube-system" || spec.ServiceAccountName != m.sa.Name {
		t.Errorf("namespace %q service account %q", ds.Namespace, spec.ServiceAccountName)
	}
	if !spec.HostNetwork || spec.PriorityClassName != "system-node-critical" {
		t.Errorf("hostNetwork %v priorityClassName %q", spec.HostNetwork, spec.PriorityClassName)
	}
	// The daemon must reach the API server without cluster DNS: cluster DNS is a
	// ClusterIP only this daemon programs, so a rebooted node that resolved the API
	// server's name through it would never come up. A host-network pod with the
	// default policy (ClusterFirst, as kubeadm's kube-proxy) uses the node's resolver.
	if spec.DNSPolicy != "" && spec.DNSPolicy != v1.DNSClusterFirst && spec.DNSPolicy != v1.DNSDefault {
		t.Errorf("dnsPolicy %q: the API server's name must resolve without cluster DNS (leave it unset, as kubeadm does)", spec.DNSPolicy)
	}
	if len(spec.Tolerations) != 1 || spec.Tolerations[0].Operator != v1.TolerationOpExists || spec.Tolerations[0].Key != "" {
		t.Errorf("tolerations %+v, want a single operator: Exists", spec.Tolerations)
	}
	ru := ds.Spec.UpdateStrategy.RollingUpdate
	if ds.Spec.UpdateStrategy.Type != appsv1.RollingUpdateDaemonSetStrategyType || ru == nil || ru.MaxUnavailable == nil || *ru.MaxUnavailable != intstr.FromString("10%") {
		t.Errorf("update strategy %+v", ds.Spec.UpdateStrategy)
	}
	if len(spec.Containers) != 1 {
		t.Fatalf("%d containers", len(spec.Containers))
	}
	c := spec.Containers[0]
	if c.SecurityContext == nil || c.SecurityContext.Privileged == nil || !*c.SecurityContext.Privileged {
		t.Error("container is not privileged")
	}
	for probe, want := range map[*v1.Probe]string{c.LivenessProbe: "/livez", c.ReadinessProbe: "/healthz"} {
		if probe == nil || probe.HTTPGet == nil || probe.HTTPGet.Path != want || probe.HTTPGet.Port != intstr.FromInt32(10256) {
			t.Errorf("probe for %s: %+v", want, probe)
		}
	}

	volumes := map[string]v1.Volume{}
	for _, v := range spec.Volumes {
		volumes[v.Name] = v
	}
	mounts := map[string]v1.VolumeMount{}
	for _, vm := range c.VolumeMounts {
		mounts[vm.MountPath] = vm
		if _, ok := volumes[vm.Name]; !ok {
			t.Errorf("mount %s uses undefined volume %q", vm.MountPath, vm.Name)
		}
	}
	if vm, ok := mounts["/lib/modules"]; !ok || !vm.ReadOnly || volumes[vm.Name].HostPath == nil || volumes[vm.Name].HostPath.Path != "/lib/modules" {
		t.Errorf("/lib/modules not mounted read-only from the host: %+v", vm)
	}
	if vm, ok := mounts["/run/xtables.lock"]; !ok || volumes[vm.Name].HostPath == nil ||
		volumes[vm.Name].HostPath.Type == nil || *volumes[vm.Name].HostPath.Type != v1.HostPathFileOrCreate {
		t.Errorf("/run/xtables.lock not a FileOrCreate host path: %+v", vm)
	}

	// --config points at the ConfigMap's key through the mount.
	var configPath string
	for _, arg := range c.Command {
		if p, ok := strings.CutPrefix(arg, "--config="); ok {
			configPath = p
		}
	}
	vm, ok := mounts[filepath.Dir(configPath)]
	if !ok || volumes[vm.Name].ConfigMap == nil || volumes[vm.Name].ConfigMap.Name != m.cm.Name {
		t.Fatalf("--config=%s is not in the mounted ConfigMap %s", configPath, m.cm.Name)
	}
	if _, ok := m.cm.Data[filepath.Base(configPath)]; !ok {
		t.Errorf("ConfigMap has no key %s", filepath.Base(configPath))
	}
}

func TestConfigMapConfigLoads(t *testing.T) {
	m := parse(t)
	data := m.cm.Data["config.conf"]
	cfg, err := proxyconfigapi.Decode([]byte(data))
	if err != nil {
		t.Fatalf("ConfigMap config.conf does not load: %v", err)
	}
	fg := featuregate.NewFeatureGate()
	if err := logsapi.AddFeatureGates(fg); err != nil {
		t.Fatal(err)
	}
	if errs := proxyconfigapi.Validate(cfg, fg); len(errs) > 0 {
		t.Fatalf("ConfigMap config.conf is invalid: %v", errs.ToAggregate())
	}
	if cfg.Mode != "ipvs" || cfg.IPVS.Scheduler != "rr" {
		t.Errorf("mode %q scheduler %q", cfg.Mode, cfg.IPVS.Scheduler)
	}

	// And the daemon itself accepts it, with the DaemonSet's flags.
	path := filepath.Join(t.TempDir(), "config.conf")
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	out := filepath.Join(t.TempDir(), "effective.yaml")
	if code := app.Execute([]string{"--config=" + path, "--hostname-override=node-a", "--write-config-to", out}, &stdout, &stderr); code != 0 {
		t.Fatalf("kube-proxy rejected the ConfigMap config: exit %d: %s", code, stderr.String())
	}
}

// TestStandaloneNamesNeverCollideWithKubeadm: applying the standalone install
// to a kubeadm cluster must not overwrite kubeadm's kube-proxy ConfigMap (its
// clusterCIDR and nodePortAddresses), ServiceAccount, binding or DaemonSet.
func TestStandaloneNamesNeverCollideWithKubeadm(t *testing.T) {
	kubeadmNames := map[string]bool{"kube-proxy": true, "kubeadm:node-proxier": true, "system:node-proxier": true}
	for _, obj := range loadManifest(t) {
		m, err := meta.Accessor(obj)
		if err != nil {
			t.Fatal(err)
		}
		if kubeadmNames[m.GetName()] {
			t.Errorf("%T %s/%s has the name of one of kubeadm's kube-proxy objects", obj, m.GetNamespace(), m.GetName())
		}
	}
}

// TestStandaloneReachesTheAPIServerDirectly: the client is the ConfigMap's
// kubeconfig.conf (service-account token and CA, no server) with --master set
// from the ConfigMap's apiServer key through an env var: never in-cluster config,
// which is the `kubernetes` Service's ClusterIP that only this daemon programs.
func TestStandaloneReachesTheAPIServerDirectly(t *testing.T) {
	m := parse(t)
	c := m.ds.Spec.Template.Spec.Containers[0]
	cfg, err := proxyconfigapi.Decode([]byte(m.cm.Data["config.conf"]))
	if err != nil {
		t.Fatal(err)
	}
	mounts := map[string]v1.VolumeMount{}
	for _, vm := range c.VolumeMounts {
		mounts[vm.MountPath] = vm
	}
	kc := cfg.ClientConnection.Kubeconfig
	if vm, ok := mounts[filepath.Dir(kc)]; kc == "" || !ok || vm.Name != "kube-proxy-config" {
		t.Fatalf("clientConnection.kubeconfig %q is not in the ConfigMap mount", kc)
	}
	kubeconfig, err := clientcmd.Load([]byte(m.cm.Data[filepath.Base(kc)]))
	if err != nil {
		t.Fatalf("ConfigMap key %s: %v", filepath.Base(kc), err)
	}
	for name, cluster := range kubeconfig.Clusters {
		if cluster.Server != "" {
			t.Errorf("kubeconfig cluster %s has server %q: the address belongs in the apiServer key only", name, cluster.Server)
		}
		if cluster.CertificateAuthority != "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt" {
			t.Errorf("kubeconfig cluster %s CA %q", name, cluster.CertificateAuthority)
		}
	}
	for name, user := range kubeconfig.AuthInfos {
		if user.TokenFile != "/var/run/secrets/kubernetes.io/serviceaccount/token" {
			t.Errorf("kubeconfig user %s token file %q", name, user.TokenFile)
		}
	}
	if !contains(c.Command, "--master=$(KUBE_API_SERVER)") {
		t.Errorf("command %q does not pass --master=$(KUBE_API_SERVER)", c.Command)
	}
	var ref *v1.ConfigMapKeySelector
	for _, e := range c.Env {
		if e.Name == "KUBE_API_SERVER" && e.ValueFrom != nil {
			ref = e.ValueFrom.ConfigMapKeyRef
		}
	}
	if ref == nil || ref.Name != m.cm.Name || m.cm.Data[ref.Key] == "" {
		t.Fatalf("KUBE_API_SERVER does not come from a key of ConfigMap %s: %+v", m.cm.Name, ref)
	}
	if !strings.HasPrefix(m.cm.Data[ref.Key], "https://") {
		t.Errorf("apiServer %q is not an https URL", m.cm.Data[ref.Key])
	}
}

// TestStandaloneKustomizeBuildEqualsPlainYAML: `kubectl apply -k
// deploy/standalone` (kustomize, the version kubectl 1.37 embeds) produces
// exactly the objects of the plain YAML.
func TestStandaloneKustomizeBuildEqualsPlainYAML(t *testing.T) {
	built := kustomizeBuild(t, "standalone")
	plain := loadManifest(t)
	if diff := cmp.Diff(objectsByName(t, plain), objectsByName(t, built)); diff != "" {
		t.Errorf("kustomize build differs from the plain YAML (-plain +kustomize):\n%s", diff)
	}
}

// kustomizeBuild runs kustomize on dir (relative to deploy/) and strictly
// decodes the result.
func kustomizeBuild(t *testing.T, dir string) []runtime.Object {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	resMap, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	out, err := resMap.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	return decodeObjects(t, "kustomize build "+dir, out)
}

// objectsByName keys objects by "Kind namespace/name".
func objectsByName(t *testing.T, objs []runtime.Object) map[string]runtime.Object {
	t.Helper()
	byName := map[string]runtime.Object{}
	for _, obj := range objs {
		m, err := meta.Accessor(obj)
		if err != nil {
			t.Fatal(err)
		}
		byName[fmt.Sprintf("%T %s/%s", obj, m.GetNamespace(), m.GetName())] = obj
	}
	return byName
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// onlyComments reports whether a YAML document holds nothing but comments and
// blank lines.
func onlyComments(doc []byte) bool {
	for _, line := range bytes.Split(doc, []byte("\n")) {
		if l := bytes.TrimSpace(line); len(l) > 0 && l[0] != '#' {
			return false
		}
	}
	return true
}

// TestDaemonSetYAMLIsTheStandaloneManifest: deploy/daemonset.yaml, the one file a user
// applies, is the standalone manifest.
func TestDaemonSetYAMLIsTheStandaloneManifest(t *testing.T) {
	a, err := os.ReadFile("daemonset.yaml")
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(standaloneManifest)
	if err != nil {
		t.Fatal(err)
	}
	if string(a) != string(b) {
		t.Errorf("deploy/daemonset.yaml differs from deploy/%s: cp deploy/%s deploy/daemonset.yaml", standaloneManifest, standaloneManifest)
	}
}
