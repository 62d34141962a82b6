package app

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/kube-proxy/config/v1alpha1"

	proxyconfigapi "github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/apis/config"
)

// apiserverStub records the requests a client makes (127.0.0.1 only).
type apiserverStub struct {
	mu       sync.Mutex
	requests []*http.Request
	srv      *httptest.Server
}

func newAPIServerStub(t *testing.T) *apiserverStub {
	s := &apiserverStub{}
	s.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.requests = append(s.requests, r)
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}`))
	}))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *apiserverStub) last(t *testing.T) *http.Request {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.requests) == 0 {
		t.Fatal("the client made no request")
	}
	return s.requests[len(s.requests)-1]
}

func kubeconfigFor(t *testing.T, server string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubeconfig")
	content := `apiVersion: v1
kind: Config
clusters:
- name: c
  cluster:
    server: ` + server + `
    insecure-skip-tls-verify: true
users:
- name: u
  user:
    token: secret-token
contexts:
- name: ctx
  context: {cluster: c, user: u}
current-context: ctx
`
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestCreateClientUsesKubeconfigAndContentType(t *testing.T) {
	stub := newAPIServerStub(t)
	cfg := proxyconfigapi.NewDefaultConfiguration()
	cfg.ClientConnection.Kubeconfig = kubeconfigFor(t, stub.srv.URL)

	client, err := createClient(context.Background(), cfg, "")
	if err != nil {
		t.Fatal(err)
	}
	_, _ = client.CoreV1().Nodes().Get(context.Background(), "node-a", metav1.GetOptions{})
	r := stub.last(t)
	if r.URL.Path != "/api/v1/nodes/node-a" {
		t.Errorf("path %s", r.URL.Path)
	}
	if got := r.Header.Get("Accept"); !strings.HasPrefix(got, "application/vnd.kubernetes.protobuf") {
		t.Errorf("Accept %q, want protobuf first (kube-api-content-type default)", got)
	}
	if got := r.Header.Get("Authorization"); got != "Bearer secret-token" {
		t.Errorf("Authorization %q, want the kubeconfig's token", got)
	}
	if got := r.Header.Get("User-Agent"); got == "" {
		t.Error("no User-Agent")
	}
}

func TestCreateClientMasterOverridesKubeconfig(t *testing.T) {
	wrong := newAPIServerStub(t)
	right := newAPIServerStub(t)
	cfg := proxyconfigapi.NewDefaultConfiguration()
	cfg.ClientConnection.Kubeconfig = kubeconfigFor(t, wrong.srv.URL)
	cfg.ClientConnection.ContentType = "application/json"

	client, err := createClient(context.Background(), cfg, right.srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = client.CoreV1().Nodes().Get(context.Background(), "node-a", metav1.GetOptions{})
	if got := right.last(t).Header.Get("Accept"); strings.Contains(got, "protobuf") {
		t.Errorf("Accept %q with content type application/json", got)
	}
	wrong.mu.Lock()
	defer wrong.mu.Unlock()
	if len(wrong.requests) != 0 {
		t.Error("--master did not override the kubeconfig's server")
	}
}

func TestCreateClientInClusterError(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	t.Setenv("KUBERNETES_SERVICE_PORT", "")
	_, err := createClient(context.Background(), &v1alpha1.KubeProxyConfiguration{}, "")
	if err == nil || !strings.Contains(err.Error(), "in-cluster") {
		t.Errorf("without kubeconfig, master or in-cluster env: %v", err)
	}
}
