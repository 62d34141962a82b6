package app

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	proxyconfigapi "github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/apis/config"
	proxymetrics "github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/metrics"
)

// TestZPagesShowTheCommandLine: /flagz lists every flag with the value the daemon
// runs with (a --config file's included, flags over it), /statusz names the version
// --version prints and the paths; each page is off with its feature gate off.
func TestZPagesShowTheCommandLine(t *testing.T) {
	serve := func(args ...string) http.Handler {
		t.Helper()
		opts := newOptions(proxyconfigapi.NewFlagDefaultConfiguration(), newFeatureGate())
		fs := pflag.NewFlagSet(componentName, pflag.ContinueOnError)
		opts.AddFlags(fs)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		r := &invocation{opts: opts, args: args}
		if err := r.complete(fs); err != nil {
			t.Fatal(err)
		}
		if err := r.validate(); err != nil {
			t.Fatal(err)
		}
		s := &ProxyServer{FeatureGate: r.opts.featureGate, Flags: r.opts.flags}
		return proxymetrics.WithZPages(http.NotFoundHandler(), s.zpages())
	}
	get := func(h http.Handler, path string) (int, string) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		return rec.Code, rec.Body.String()
	}
	config := writeFile(t, "config.yaml", "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nipvs:\n  scheduler: wrr\n")
	h := serve("--config", config, "--ipvs-min-sync-period=7s")
	code, body := get(h, "/flagz")
	for _, want := range []string{"kube-proxy flagz", "ipvs-scheduler", "wrr", "ipvs-min-sync-period", "7s", "ipvs-rules-backend"} {
		if code != http.StatusOK || !strings.Contains(body, want) {
			t.Errorf("/flagz: %d, lacks %q:\n%s", code, want, body)
		}
	}
	code, body = get(h, "/statusz")
	for _, want := range []string{"kube-proxy statusz", binaryVersion(), "1.37", "/metrics"} {
		if code != http.StatusOK || !strings.Contains(body, want) {
			t.Errorf("/statusz: %d, lacks %q:\n%s", code, want, body)
		}
	}
	off := serve("--feature-gates=ComponentFlagz=false,ComponentStatusz=false")
	for _, path := range []string{"/flagz", "/statusz"} {
		if code, _ := get(off, path); code != http.StatusNotFound {
			t.Errorf("gates off: %s answered %d", path, code)
		}
	}
}
