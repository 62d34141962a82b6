package deploy

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"sigs.k8s.io/yaml"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/cmd/kube-proxy/app"
	proxyconfigapi "github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/apis/config"
)

// kubeadmAddon is what kubeadm v1.37.2 creates for kube-proxy (ServiceAccount,
// ClusterRoleBinding to system:node-proxier, Role and RoleBinding for its
// ConfigMap, the ConfigMap with config.conf and kubeconfig.conf, the
// DaemonSet), rendered by kubeadm's own code (hack/update-kubeadm-testdata.sh)
// for testdata/kubeadm-config.yaml.
const kubeadmAddon = "testdata/kubeadm-v1.37.2-addon-kube-proxy.yaml"

type kubeadmObjects struct {
	sa      *v1.ServiceAccount
	binding *rbacv1.ClusterRoleBinding
	cm      *v1.ConfigMap
	ds      *appsv1.DaemonSet
}

func loadKubeadmAddon(t *testing.T) kubeadmObjects {
	t.Helper()
	data, err := os.ReadFile(kubeadmAddon)
	if err != nil {
		t.Fatal(err)
	}
	var k kubeadmObjects
	for _, obj := range decodeObjects(t, kubeadmAddon, data) {
		switch o := obj.(type) {
		case *v1.ServiceAccount:
			k.sa = o
		case *rbacv1.ClusterRoleBinding:
			k.binding = o
		case *v1.ConfigMap:
			k.cm = o
		case *appsv1.DaemonSet:
			k.ds = o
		}
	}
	if k.sa == nil || k.binding == nil || k.cm == nil || k.ds == nil {
		t.Fatalf("%s lacks kubeadm's objects: %+v", kubeadmAddon, k)
	}
	return k
}

// withImage returns ds with its one container's image replaced.
func withImage(t *testing.T, ds *appsv1.DaemonSet, image string) *appsv1.DaemonSet {
	t.Helper()
	out := ds.DeepCopy()
	if len(out.Spec.Template.Spec.Containers) != 1 {
		t.Fatalf("kubeadm's DaemonSet has %d containers", len(out.Spec.Template.Spec.Containers))
	}
	out.Spec.Template.Spec.Containers[0].Image = image
	return out
}

// TestKubeadmConfigLoads: every field kubeadm writes into config.conf loads
// with the strict loader, and the daemon accepts it with the DaemonSet's own
// command line.
func TestKubeadmConfigLoads(t *testing.T) {
	k := loadKubeadmAddon(t)
	data := k.cm.Data["config.conf"]
	cfg, err := proxyconfigapi.Decode([]byte(data))
	if err != nil {
		t.Fatalf("kubeadm's config.conf does not load: %v", err)
	}
	checks := []struct {
		name      string
		got, want any
	}{
		{"mode", string(cfg.Mode), "ipvs"},
		{"strictARP", cfg.IPVS.StrictARP, true},
		{"clusterCIDR (kubeadm's podSubnet)", cfg.ClusterCIDR, "10.244.0.0/16"},
		{"kubeconfig (kubeadm's kubeconfig.conf)", cfg.ClientConnection.Kubeconfig, "/var/lib/kube-proxy/kubeconfig.conf"},
		{"syncPeriod defaulted", cfg.IPVS.SyncPeriod.Duration.String(), "30s"},
		{"healthz defaulted", cfg.HealthzBindAddress, "0.0.0.0:10256"},
	}
	for _, c := range checks {
		if diff := cmp.Diff(c.want, c.got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", c.name, diff)
		}
	}

	dir := t.TempDir()
	path := filepath.Join(dir, "config.conf")
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	// The DaemonSet's command, with the mount path replaced by the temp dir.
	args := []string{}
	for _, a := range k.ds.Spec.Template.Spec.Containers[0].Command[1:] {
		a = regexp.MustCompile(`^--config=/var/lib/kube-proxy/`).ReplaceAllString(a, "--config="+dir+"/")
		a = regexp.MustCompile(`\$\(NODE_NAME\)`).ReplaceAllString(a, "node-a")
		args = append(args, a)
	}
	var stdout, stderr bytes.Buffer
	if code := app.Execute(append(args, "--write-config-to", filepath.Join(dir, "out.yaml")), &stdout, &stderr); code != 0 {
		t.Fatalf("kube-proxy %q: exit %d: %s", args, code, stderr.String())
	}
}

// TestKubeadmDaemonSetRunsOurBinaryAsIs: kubeadm's command is
// /usr/local/bin/kube-proxy, where our image puts the daemon, so the image is
// the only thing to change.
func TestKubeadmDaemonSetRunsOurBinaryAsIs(t *testing.T) {
	k := loadKubeadmAddon(t)
	dockerfile, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^COPY --from=build \S+ (\S+)$`).FindSubmatch(dockerfile)
	if m == nil {
		t.Fatal("no COPY of the binary in the Dockerfile")
	}
	if got := k.ds.Spec.Template.Spec.Containers[0].Command[0]; got != string(m[1]) {
		t.Errorf("kubeadm runs %s, our image has the daemon at %s", got, m[1])
	}
}

// TestKubeadmImagePatchChangesOnlyTheImage: what `kubectl patch --patch-file
// deploy/kubeadm/image-patch.yaml` does to kubeadm's DaemonSet (a strategic
// merge patch) is to replace the image, nothing else.
func TestKubeadmImagePatchChangesOnlyTheImage(t *testing.T) {
	k := loadKubeadmAddon(t)
	patchYAML, err := os.ReadFile("kubeadm/image-patch.yaml")
	if err != nil {
		t.Fatal(err)
	}
	patch, err := yaml.YAMLToJSON(patchYAML)
	if err != nil {
		t.Fatal(err)
	}
	orig, err := json.Marshal(k.ds)
	if err != nil {
		t.Fatal(err)
	}
	patched, err := strategicpatch.StrategicMergePatch(orig, patch, appsv1.DaemonSet{})
	if err != nil {
		t.Fatal(err)
	}
	var got appsv1.DaemonSet
	if err := json.Unmarshal(patched, &got); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(withImage(t, k.ds, "kube-proxy-ipvs:dev"), &got); diff != "" {
		t.Errorf("patched DaemonSet differs from kubeadm's with the image changed (-want +got):\n%s", diff)
	}
}

// TestKubeadmKustomizeChangesOnlyTheImage: the kustomize overlay emits
// kubeadm's DaemonSet with the image changed and nothing else: no ConfigMap,
// ServiceAccount or binding that would replace kubeadm's.
func TestKubeadmKustomizeChangesOnlyTheImage(t *testing.T) {
	k := loadKubeadmAddon(t)
	objs := kustomizeBuild(t, "kubeadm")
	if len(objs) != 1 {
		t.Fatalf("kustomize build kubeadm: %d objects, want only the DaemonSet", len(objs))
	}
	ds, ok := objs[0].(*appsv1.DaemonSet)
	if !ok {
		t.Fatalf("kustomize build kubeadm: %T, want the DaemonSet", objs[0])
	}
	if diff := cmp.Diff(withImage(t, k.ds, "kube-proxy-ipvs:dev"), ds); diff != "" {
		t.Errorf("overlay's DaemonSet differs from kubeadm's with the image changed (-want +got):\n%s", diff)
	}
}

// TestKubeadmExtrasOverlay: deploy/kubeadm-extras is kubeadm's DaemonSet with our
// image, plus a ConfigMap of its own (kubeadm never rewrites it) whose ipvs.conf is
// a valid KubeProxyIPVSConfiguration, mounted where --ipvs-config reads it; nothing
// else of kubeadm's DaemonSet changes.
func TestKubeadmExtrasOverlay(t *testing.T) {
	k := loadKubeadmAddon(t)
	objs := kustomizeBuild(t, "kubeadm-extras")
	var ds *appsv1.DaemonSet
	var cm *v1.ConfigMap
	for _, o := range objs {
		switch o := o.(type) {
		case *appsv1.DaemonSet:
			ds = o
		case *v1.ConfigMap:
			cm = o
		default:
			t.Errorf("kustomize build kubeadm-extras: unexpected %T", o)
		}
	}
	if ds == nil || cm == nil || len(objs) != 2 {
		t.Fatalf("kustomize build kubeadm-extras: %d objects, want the DaemonSet and the ConfigMap", len(objs))
	}
	if cm.Name == k.cm.Name || cm.Namespace != "kube-system" {
		t.Errorf("ConfigMap %s/%s: must be kube-system's and not kubeadm's %s", cm.Namespace, cm.Name, k.cm.Name)
	}
	if _, err := proxyconfigapi.DecodeExtras([]byte(cm.Data["ipvs.conf"])); err != nil {
		t.Errorf("ipvs.conf: %v", err)
	}
	want := withImage(t, k.ds, "kube-proxy-ipvs:dev")
	c := &want.Spec.Template.Spec.Containers[0]
	c.Command = append(c.Command, "--ipvs-config=/var/lib/kube-proxy-ipvs/ipvs.conf")
	c.VolumeMounts = append(c.VolumeMounts, v1.VolumeMount{Name: "kube-proxy-ipvs-extras", MountPath: "/var/lib/kube-proxy-ipvs", ReadOnly: true})
	want.Spec.Template.Spec.Volumes = append(want.Spec.Template.Spec.Volumes, v1.Volume{Name: "kube-proxy-ipvs-extras",
		VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{LocalObjectReference: v1.LocalObjectReference{Name: cm.Name}}}})
	if diff := cmp.Diff(want, ds); diff != "" {
		t.Errorf("overlay's DaemonSet (-want +got):\n%s", diff)
	}
}
