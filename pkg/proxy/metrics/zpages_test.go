package metrics

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"
)

func zpagesGet(t *testing.T, h http.Handler, path, accept string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, path, nil)
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// TestZPages: /flagz and /statusz answer as upstream's: a text page for people (the
// header, then one "name<delimiter>value" line each, with a delimiter chosen per
// answer) and config.k8s.io Flagz / Statusz objects as JSON when asked for them;
// anything else is 406; a page that is off is not served.
func TestZPages(t *testing.T) {
	start := time.Now().Add(-(3*time.Hour + 4*time.Minute + 5*time.Second))
	z := ZPages{Component: "kube-proxy", Flags: func() map[string]string { return map[string]string{"v": "2", "proxy-mode": "ipvs"} },
		Statusz: true, Start: start, BinaryVersion: "v0.1.0", EmulationVersion: "1.37",
		Paths: []string{"/metrics", "/debug/pprof/", "/debug/flags/v", "/healthz", "/"}}
	h := WithZPages(http.NotFoundHandler(), z)

	rec := zpagesGet(t, h, "/flagz", "")
	if !regexp.MustCompile(`^\nkube-proxy flagz\nWarning: This endpoint is not meant to be machine parseable, has no formatting compatibility guarantees and is for debugging purposes only.\n\nproxy-mode(:|: |=| )ipvs\nv(:|: |=| )2\n$`).MatchString(rec.Body.String()) {
		t.Errorf("/flagz text:\n%q", rec.Body.String())
	}
	if ct := rec.Header().Get("Content-Type"); ct != "text/plain; charset=utf-8" {
		t.Errorf("/flagz content type %q", ct)
	}
	rec = zpagesGet(t, h, "/statusz", "text/plain")
	want := `^\nkube-proxy statusz\nWarning: [^\n]+\n\nStarted(:|: |=| ) [^\n]+\nUp(:|: |=| ) 3 hr 04 min 0[5-9] sec\nGo version(:|: |=| ) ` + regexp.QuoteMeta(runtime.Version()) +
		`\nBinary version(:|: |=| ) v0\.1\.0\nEmulation version(:|: |=| ) 1\.37\nPaths(:|: |=| ) /debug /healthz /metrics\n$`
	if !regexp.MustCompile(want).MatchString(rec.Body.String()) {
		t.Errorf("/statusz text:\n%q", rec.Body.String())
	}

	for _, v := range []string{"v1beta1", "v1alpha1"} {
		rec = zpagesGet(t, h, "/flagz", "application/json;as=Flagz;g=config.k8s.io;v="+v)
		var f struct {
			Kind, APIVersion string
			Metadata         map[string]string
			Flags            map[string]string
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &f); err != nil || f.Kind != "Flagz" || f.APIVersion != "config.k8s.io/"+v ||
			f.Metadata["name"] != "kube-proxy" || f.Flags["proxy-mode"] != "ipvs" {
			t.Errorf("/flagz %s: %v %+v from %s", v, err, f, rec.Body)
		}
		if dep := rec.Header().Get("Warning") != ""; dep != (v == "v1alpha1") {
			t.Errorf("/flagz %s: Warning %q", v, rec.Header().Get("Warning"))
		}
	}
	rec = zpagesGet(t, h, "/statusz", "application/json;as=Statusz;g=config.k8s.io;v=v1beta1")
	var st struct {
		Kind, APIVersion, GoVersion, BinaryVersion, EmulationVersion string
		StartTime                                                    time.Time
		UptimeSeconds                                                int64
		Paths                                                        []string
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &st); err != nil || st.Kind != "Statusz" || st.UptimeSeconds < 11045 ||
		!st.StartTime.Equal(start.UTC().Truncate(time.Second)) || st.BinaryVersion != "v0.1.0" || strings.Join(st.Paths, " ") != "/debug /healthz /metrics" {
		t.Errorf("/statusz JSON: %v %+v from %s", err, st, rec.Body)
	}
	for path, accept := range map[string]string{"/flagz": "application/json", "/statusz": "application/json;as=Flagz;g=config.k8s.io;v=v1beta1", "/x": ""} {
		code := zpagesGet(t, h, path, accept).Code
		if want := map[bool]int{true: http.StatusNotFound, false: http.StatusNotAcceptable}[path == "/x"]; code != want {
			t.Errorf("GET %s Accept %q: %d, want %d", path, accept, code, want)
		}
	}

	off := WithZPages(http.NotFoundHandler(), ZPages{Component: "kube-proxy"})
	for _, path := range []string{"/flagz", "/statusz"} {
		if code := zpagesGet(t, off, path, "").Code; code != http.StatusNotFound {
			t.Errorf("gates off: GET %s = %d, want 404", path, code)
		}
	}
}
