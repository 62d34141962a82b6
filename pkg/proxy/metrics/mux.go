package metrics

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/pprof"
	"reflect"
	"strings"

	"k8s.io/component-base/logs"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/component-base/metrics/prometheus/slis"
)

// NewMetricsMux returns the handler upstream serves on metricsBindAddress:
//
//	/metrics         every registered metric (legacyregistry), Go and process included
//	/metrics/slis    component-base health-check SLIs
//	/healthz         "ok" (liveness of the metrics server itself, as upstream)
//	/proxyMode       proxyMode as plain text
//	/configz         configz() as JSON (404 when configz is nil); for upstream-identical
//	                 output return map[string]any{"kubeproxy.config.k8s.io": cfg}
//	/debug/pprof/*   when enableProfiling
//	/debug/flags/v   when enableProfiling: PUT a number to set the klog verbosity
//
// It calls RegisterMetrics, so the upstream metrics are always present.
func NewMetricsMux(proxyMode string, enableProfiling bool, configz func() any) http.Handler {
	RegisterMetrics()

	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", serveHealthz)
	mux.HandleFunc("/healthz/ping", serveHealthz)
	slis.SLIMetricsWithReset{}.Install(mux)

	mux.HandleFunc("/proxyMode", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		_, _ = io.WriteString(w, proxyMode)
	})

	mux.Handle("/metrics", legacyregistry.Handler())

	if enableProfiling {
		mux.HandleFunc("/debug/pprof", func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "/debug/pprof/", http.StatusFound)
		})
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		mux.HandleFunc("/debug/flags/v", putFlagHandler(logs.GlogSetter))
	}

	if configz != nil {
		mux.HandleFunc("/configz", func(w http.ResponseWriter, _ *http.Request) {
			body, err := json.Marshal(configz())
			if err != nil {
				http.Error(w, fmt.Sprintf("error marshaling configz: %v", err), http.StatusInternalServerError)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("X-Content-Type-Options", "nosniff")
			_, _ = w.Write(body)
		})
	}
	return mux
}

// serveHealthz answers like the apiserver healthz handler with only its ping check
// installed, which is what upstream mounts on the metrics server.
func serveHealthz(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if _, verbose := r.URL.Query()["verbose"]; verbose && !strings.HasSuffix(r.URL.Path, "/ping") {
		_, _ = io.WriteString(w, "[+]ping ok\nhealthz check passed\n")
		return
	}
	_, _ = io.WriteString(w, "ok")
}

// maxFlagBody caps the body of a PUT to /debug/flags/v: a verbosity is a few digits.
const maxFlagBody = 64

// putFlagHandler sets a flag from a PUT body, answering as upstream's
// /debug/flags handlers do (plain text, 400 on a bad value, 406 on other methods).
func putFlagHandler(set func(string) (string, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPut {
			writePlainText(w, http.StatusNotAcceptable, "unsupported http method")
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxFlagBody))
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			writePlainText(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body over %d bytes", maxFlagBody))
			return
		}
		if err != nil {
			writePlainText(w, http.StatusBadRequest, "error reading request body: "+err.Error())
			return
		}
		resp, err := set(string(body))
		if err != nil {
			writePlainText(w, http.StatusBadRequest, err.Error())
			return
		}
		writePlainText(w, http.StatusOK, resp)
	}
}

func writePlainText(w http.ResponseWriter, code int, text string) {
	w.Header().Set("Content-Type", "text/plain")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	_, _ = fmt.Fprintln(w, text)
}

// HeldBackPath lists, as JSON, the objects the proxier is not programming (values it
// refused, writes the kernel refused and that are being retried), with their Services,
// reason, error and next retry. kubeproxy_ipvs_held_back_objects counts them.
const HeldBackPath = "/debug/kube-proxy-ipvs/held-back"

// MaxHeldBackListed bounds the objects one answer of HeldBackPath lists; the rest are
// counted in its "total" and the answer says "truncated".
const MaxHeldBackListed = 1000

// heldBackAnswer is what HeldBackPath serves.
type heldBackAnswer struct {
	// Total is how many objects are held back; Items lists the first
	// MaxHeldBackListed of them, and Truncated says that some were left out.
	Total     int  `json:"total"`
	Truncated bool `json:"truncated"`
	Items     any  `json:"items"`
}

// WithHeldBack serves HeldBackPath from list (a slice) and everything else from next.
func WithHeldBack(next http.Handler, list func() any) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/", next)
	mux.HandleFunc(HeldBackPath, func(w http.ResponseWriter, _ *http.Request) {
		items := list()
		answer := heldBackAnswer{Items: items}
		if v := reflect.ValueOf(items); v.Kind() == reflect.Slice {
			answer.Total = v.Len()
			if v.Len() > MaxHeldBackListed {
				answer.Items, answer.Truncated = v.Slice(0, MaxHeldBackListed).Interface(), true
			}
		}
		body, err := json.MarshalIndent(answer, "", "  ")
		if err != nil {
			http.Error(w, fmt.Sprintf("error marshaling the held-back list: %v", err), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		_, _ = w.Write(append(body, '\n'))
	})
	return mux
}
