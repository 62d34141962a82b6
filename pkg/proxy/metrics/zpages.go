package metrics

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"mime"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"time"
)

// ZPages are upstream's /flagz and /statusz (feature gates ComponentFlagz and
// ComponentStatusz), which upstream kube-proxy serves on its metrics server. Both
// answer plain text for people (no Accept header, or text/plain), and the
// config.k8s.io Flagz and Statusz objects (v1beta1, or v1alpha1 with a deprecation
// warning) as JSON when asked with `Accept: application/json;as=Flagz;g=config.k8s.io;v=v1beta1`.
type ZPages struct {
	// Component names the daemon in both pages ("kube-proxy").
	Component string
	// Flags returns every flag of the command line with its value; nil: no /flagz.
	Flags func() map[string]string
	// Statusz serves /statusz.
	Statusz bool
	// Start is when the process started; BinaryVersion and EmulationVersion what
	// /statusz reports.
	Start            time.Time
	BinaryVersion    string
	EmulationVersion string
	// Paths are the paths the server serves; /statusz lists their first segments.
	Paths []string
}

// zpagesWarning heads both text pages, as upstream's.
const zpagesWarning = "Warning: This endpoint is not meant to be machine parseable, has no formatting compatibility guarantees and is for debugging purposes only."

// zpagesDelimiters: the text pages separate names from values with one of these,
// chosen anew for each answer, as upstream does, so that nobody parses them.
var zpagesDelimiters = []string{":", ": ", "=", " "}

// WithZPages serves z's pages and everything else from next.
func WithZPages(next http.Handler, z ZPages) http.Handler {
	if z.Flags == nil && !z.Statusz {
		return next
	}
	mux := http.NewServeMux()
	mux.Handle("/", next)
	if z.Flags != nil {
		mux.HandleFunc("/flagz", z.serveFlagz)
	}
	if z.Statusz {
		mux.HandleFunc("/statusz", z.serveStatusz)
	}
	return mux
}

// zpageObject is the structured answer: a config.k8s.io Flagz or Statusz.
type zpageObject struct {
	Kind       string            `json:"kind"`
	APIVersion string            `json:"apiVersion"`
	Metadata   map[string]string `json:"metadata"`

	Flags map[string]string `json:"flags,omitempty"`

	StartTime        *time.Time `json:"startTime,omitempty"`
	UptimeSeconds    *int64     `json:"uptimeSeconds,omitempty"`
	GoVersion        string     `json:"goVersion,omitempty"`
	BinaryVersion    string     `json:"binaryVersion,omitempty"`
	EmulationVersion string     `json:"emulationVersion,omitempty"`
	Paths            []string   `json:"paths,omitempty"`
}

func (z ZPages) serveFlagz(w http.ResponseWriter, r *http.Request) {
	flags := z.Flags()
	version, ok := negotiate(w, r, "Flagz")
	if !ok {
		return
	}
	if version != "" {
		writeObject(w, zpageObject{Kind: "Flagz", APIVersion: "config.k8s.io/" + version,
			Metadata: map[string]string{"name": z.Component}, Flags: flags})
		return
	}
	d := zpagesDelimiters[rand.IntN(len(zpagesDelimiters))]
	var b strings.Builder
	fmt.Fprintf(&b, "\n%s flagz\n%s\n\n", z.Component, zpagesWarning)
	names := make([]string, 0, len(flags))
	for name := range flags {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		fmt.Fprintf(&b, "%s%s%s\n", name, d, flags[name])
	}
	writeText(w, b.String())
}

func (z ZPages) serveStatusz(w http.ResponseWriter, r *http.Request) {
	version, ok := negotiate(w, r, "Statusz")
	if !ok {
		return
	}
	up := int64(time.Since(z.Start).Seconds())
	paths := z.pathFolders()
	if version != "" {
		start := z.Start.UTC().Truncate(time.Second)
		writeObject(w, zpageObject{Kind: "Statusz", APIVersion: "config.k8s.io/" + version,
			Metadata: map[string]string{"name": z.Component}, StartTime: &start, UptimeSeconds: &up,
			GoVersion: runtime.Version(), BinaryVersion: z.BinaryVersion, EmulationVersion: z.EmulationVersion, Paths: paths})
		return
	}
	d := zpagesDelimiters[rand.IntN(len(zpagesDelimiters))]
	var b strings.Builder
	fmt.Fprintf(&b, "\n%s statusz\n%s\n\n", z.Component, zpagesWarning)
	fmt.Fprintf(&b, "Started%s %s\n", d, z.Start.Format(time.UnixDate))
	fmt.Fprintf(&b, "Up%s %d hr %02d min %02d sec\n", d, up/3600, (up/60)%60, up%60)
	fmt.Fprintf(&b, "Go version%s %s\n", d, runtime.Version())
	fmt.Fprintf(&b, "Binary version%s %s\n", d, z.BinaryVersion)
	if z.EmulationVersion != "" {
		fmt.Fprintf(&b, "Emulation version%s %s\n", d, z.EmulationVersion)
	}
	if len(paths) > 0 {
		fmt.Fprintf(&b, "Paths%s %s\n", d, strings.Join(paths, " "))
	}
	writeText(w, b.String())
}

// pathFolders returns the first segment of each path ("/debug" for
// "/debug/pprof"), sorted and without repeats, as upstream's /statusz lists them.
func (z ZPages) pathFolders() []string {
	var out []string
	for _, p := range z.Paths {
		parts := strings.Split(p, "/")
		if len(parts) < 2 || parts[1] == "" {
			continue
		}
		out = append(out, "/"+parts[1])
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// negotiate reads the Accept header: "" for plain text, or the version of the
// config.k8s.io object asked for as JSON. It answers 406 itself (and returns false)
// for anything it cannot serve.
func negotiate(w http.ResponseWriter, r *http.Request, kind string) (string, bool) {
	accept := strings.TrimSpace(r.Header.Get("Accept"))
	if accept == "" {
		return "", true
	}
	for _, item := range strings.Split(accept, ",") {
		mediaType, params, err := mime.ParseMediaType(strings.TrimSpace(item))
		if err != nil {
			continue
		}
		switch mediaType {
		case "text/plain", "text/*", "*/*":
			return "", true
		case "application/json":
			if params["as"] != kind || params["g"] != "config.k8s.io" {
				continue
			}
			switch params["v"] {
			case "v1beta1":
				return "v1beta1", true
			case "v1alpha1":
				w.Header().Set("Warning", fmt.Sprintf(`299 - "This version of the %s endpoint is deprecated. Please use a newer version."`, strings.ToLower(kind)))
				return "v1alpha1", true
			}
		}
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusNotAcceptable)
	fmt.Fprintf(w, "only text/plain and application/json;as=%s;g=config.k8s.io;v=v1beta1 (or v1alpha1) are served\n", kind)
	return "", false
}

func writeText(w http.ResponseWriter, text string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	_, _ = fmt.Fprint(w, text)
}

func writeObject(w http.ResponseWriter, obj zpageObject) {
	body, err := json.Marshal(obj)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	_, _ = w.Write(append(body, '\n'))
}
