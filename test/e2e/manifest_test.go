//go:build e2e

package e2e

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
)

// TestDeployManifestServerSideDryRun applies deploy/standalone/kube-proxy-ipvs.yaml to the real
// apiserver with server-side apply and dryRun=All (what `kubectl apply
// --server-side --dry-run=server` does): every object must pass the
// apiserver's validation and admission, and the file must hold a DaemonSet.
// Namespaces the manifest defines are created for real first, since objects
// in a namespace that does not exist cannot even be dry-run.
func TestDeployManifestServerSideDryRun(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(repoRoot, "deploy/standalone/kube-proxy-ipvs.yaml")
	if p := os.Getenv("KPI_E2E_MANIFEST"); p != "" {
		path = p
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("FAIL LOUDLY: cannot read the deployment manifest: %v", err)
	}
	defer f.Close()

	var objs []*unstructured.Unstructured
	dec := yaml.NewYAMLOrJSONDecoder(f, 4096)
	for {
		obj := &unstructured.Unstructured{}
		if err := dec.Decode(&obj.Object); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("%s: decoding document %d: %v", path, len(objs)+1, err)
		}
		if len(obj.Object) == 0 {
			continue
		}
		objs = append(objs, obj)
	}
	if len(objs) == 0 {
		t.Fatalf("%s holds no objects", path)
	}

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
		if obj.GetKind() == "Namespace" && obj.GetAPIVersion() == "v1" {
			_, err := cp.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: obj.GetName()}}, metav1.CreateOptions{})
			if err != nil && !apierrors.IsAlreadyExists(err) {
				t.Fatalf("creating namespace %s: %v", obj.GetName(), err)
			}
		}
	}
	daemonSets := 0
	for _, obj := range objs {
		gvk := obj.GroupVersionKind()
		if gvk.Kind == "DaemonSet" {
			daemonSets++
		}
		mapping, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			t.Errorf("%s %s: the apiserver serves no such kind: %v", gvk, obj.GetName(), err)
			continue
		}
		ri := dynamic.ResourceInterface(dyn.Resource(mapping.Resource))
		if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
			ns := obj.GetNamespace()
			if ns == "" {
				ns = "default"
			}
			ri = dyn.Resource(mapping.Resource).Namespace(ns)
		}
		out, err := ri.Apply(ctx, obj.GetName(), obj, metav1.ApplyOptions{
			FieldManager: "kpi-e2e", Force: true, DryRun: []string{metav1.DryRunAll},
		})
		if err != nil {
			t.Errorf("server-side dry-run apply of %s %s/%s: %v", gvk.Kind, obj.GetNamespace(), obj.GetName(), err)
			continue
		}
		t.Logf("dry-run applied %s %s/%s", gvk.Kind, out.GetNamespace(), out.GetName())
		if gvk.Kind == "DaemonSet" {
			containers, _, _ := unstructured.NestedSlice(out.Object, "spec", "template", "spec", "containers")
			if len(containers) == 0 {
				t.Errorf("DaemonSet %s has no containers after defaulting", out.GetName())
			}
		}
	}
	if daemonSets == 0 {
		t.Errorf("%s holds no DaemonSet", path)
	}
}
