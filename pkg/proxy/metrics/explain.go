package metrics

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
)

// ExplainPath explains one Service on this node: ?service=NAMESPACE/NAME, text for
// people or JSON with &format=json (kube-proxy explain asks it).
const ExplainPath = "/debug/kube-proxy-ipvs/explain"

// Bounds of the explain endpoint: one answer at a time, at most explainPerSecond
// answers a second, and at most maxExplainBytes in one.
const (
	explainPerSecond = 10
	maxExplainBytes  = 4 << 20
	explainTimeout   = 10 * time.Second
)

// Explainer explains Service namespace/name: a value for JSON and the text for
// people; found is false when no proxier knows the Service.
type Explainer func(ctx context.Context, namespace, name string) (value any, text string, found bool, err error)

// WithExplain serves ExplainPath from explain and everything else from next.
func WithExplain(next http.Handler, explain Explainer) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/", next)
	lim := &explainLimiter{}
	mux.HandleFunc(ExplainPath, func(w http.ResponseWriter, r *http.Request) {
		ns, name, err := parseServiceParam(r.URL.Query().Get("service"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		format := r.URL.Query().Get("format")
		if format != "" && format != "json" && format != "text" {
			http.Error(w, fmt.Sprintf("format %q: want text or json", format), http.StatusBadRequest)
			return
		}
		if busy := lim.take(); busy != "" {
			w.Header().Set("Retry-After", "1")
			http.Error(w, busy, http.StatusTooManyRequests)
			return
		}
		defer lim.done()
		ctx, cancel := context.WithTimeout(r.Context(), explainTimeout)
		defer cancel()
		value, text, found, err := explain(ctx, ns, name)
		switch {
		case err != nil:
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		case !found:
			http.Error(w, fmt.Sprintf("Service %s/%s: this node's proxier has no port of it (no such Service, or not one of its IP families, or it is not proxied)", ns, name), http.StatusNotFound)
			return
		}
		writeExplanation(w, format, value, text)
	})
	return mux
}

func writeExplanation(w http.ResponseWriter, format string, value any, text string) {
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if format == "json" {
		body, err := json.MarshalIndent(value, "", "  ")
		if err != nil {
			http.Error(w, fmt.Sprintf("error marshaling the explanation: %v", err), http.StatusInternalServerError)
			return
		}
		if len(body) > maxExplainBytes {
			http.Error(w, fmt.Sprintf("the explanation is %d bytes, more than %d", len(body), maxExplainBytes), http.StatusInsufficientStorage)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(append(body, '\n'))
		return
	}
	if len(text) > maxExplainBytes {
		text = text[:maxExplainBytes] + "\n(cut at " + fmt.Sprint(maxExplainBytes) + " bytes)\n"
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = w.Write([]byte(text))
}

// parseServiceParam reads NAMESPACE/NAME, each a DNS label as the apiserver
// requires of a Service.
func parseServiceParam(s string) (string, string, error) {
	ns, name, ok := strings.Cut(s, "/")
	if !ok {
		return "", "", fmt.Errorf("service=%q: want NAMESPACE/NAME", s)
	}
	for _, part := range []string{ns, name} {
		if errs := validation.IsDNS1123Label(part); len(errs) > 0 {
			return "", "", fmt.Errorf("service=%q: %q is not a namespace or Service name: %s", s, part, errs[0])
		}
	}
	return ns, name, nil
}

// explainLimiter lets one explanation run at a time, at most explainPerSecond a
// second: each reads the kernel.
type explainLimiter struct {
	mu      sync.Mutex
	running bool
	window  time.Time
	n       int
}

// take starts an explanation, or says why not.
func (l *explainLimiter) take() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	if now.Sub(l.window) >= time.Second {
		l.window, l.n = now, 0
	}
	switch {
	case l.running:
		return "another explanation is running; ask again in a second"
	case l.n >= explainPerSecond:
		return fmt.Sprintf("more than %d explanations a second; ask again in a second", explainPerSecond)
	}
	l.running = true
	l.n++
	return ""
}

func (l *explainLimiter) done() {
	l.mu.Lock()
	l.running = false
	l.mu.Unlock()
}
