package app

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/metrics"
)

// TestExplainCommand: `kube-proxy explain NS/NAME` prints what the daemon's explain
// endpoint answers, and says what went wrong otherwise.
func TestExplainCommand(t *testing.T) {
	srv := httptest.NewServer(metrics.WithExplain(http.NotFoundHandler(), func(_ context.Context, ns, name string) (any, string, bool, error) {
		if name == "missing" {
			return nil, "", false, nil
		}
		return map[string]string{"service": ns + "/" + name}, "Service " + ns + "/" + name + " explained\n", true, nil
	}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	run := func(args ...string) (string, error) {
		var out, errOut bytes.Buffer
		cmd := NewProxyCommand(args, &out, &errOut)
		err := cmd.Execute()
		return out.String(), err
	}
	if out, err := run("explain", "ns/web", "--metrics-address", addr); err != nil || out != "Service ns/web explained\n" {
		t.Errorf("explain: %q, %v", out, err)
	}
	if out, err := run("explain", "ns/web", "--metrics-address", addr, "-o", "json"); err != nil || !strings.Contains(out, `"service": "ns/web"`) {
		t.Errorf("explain -o json: %q, %v", out, err)
	}
	if _, err := run("explain", "ns/missing", "--metrics-address", addr); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("an unknown Service: %v", err)
	}
	if _, err := run("explain", "ns/web", "-o", "yaml"); err == nil || !strings.Contains(err.Error(), "want text or json") {
		t.Errorf("a bad --output: %v", err)
	}
	if _, err := run("explain"); err == nil {
		t.Errorf("explain without a Service ran")
	}
}
