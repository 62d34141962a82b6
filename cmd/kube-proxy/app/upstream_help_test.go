package app

import (
	"bufio"
	"bytes"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// upstreamHelpFile is `kube-proxy --help` of upstream kube-proxy v1.37.2 on
// Linux, as hack/update-upstream-help.sh captures it from the binary that
// test/e2e/lib/build-tools.sh builds from k8s.io/kubernetes v1.37.2.
const upstreamHelpFile = "testdata/upstream-kube-proxy-v1.37.2-help.txt"

// helpFlag is one flag as --help prints it.
type helpFlag struct {
	Type    string // pflag's type name ("duration", "string", ...), "" for booleans
	Default string // what "(default ...)" says, "" when --help shows none
}

// flagLine starts a flag's entry: "  -v, --v Level   usage" or "      --name type   usage".
var flagLine = regexp.MustCompile(`^\s+(?:-\w, )?--([\w-]+)(?: (\S+))?(?:\s{2,}|$)(.*)$`)

// parseHelp reads cobra/pflag --help output into flags: each one's type, and the
// default pflag appends to its usage text as "(default ...)".
func parseHelp(t *testing.T, text string) map[string]helpFlag {
	t.Helper()
	flags := map[string]helpFlag{}
	for name, e := range helpEntries(text) {
		f := helpFlag{Type: e.typ}
		if i := strings.LastIndex(e.usage, " (default "); i >= 0 && strings.HasSuffix(e.usage, ")") {
			f.Default = e.usage[i+len(" (default ") : len(e.usage)-1]
		}
		flags[name] = f
	}
	return flags
}

// helpEntry is one flag's entry of --help: its type and its usage text, white
// space folded.
type helpEntry struct{ typ, usage string }

// helpEntries reads --help output into entries. An entry runs from its flag line to
// the next flag line, blank line or section heading.
func helpEntries(text string) map[string]helpEntry {
	entries := map[string]helpEntry{}
	var name, typ string
	var usage strings.Builder
	flush := func() {
		if name != "" {
			entries[name] = helpEntry{typ: typ, usage: strings.Join(strings.Fields(usage.String()), " ")}
		}
		name = ""
		usage.Reset()
	}
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line := sc.Text()
		if m := flagLine.FindStringSubmatch(line); m != nil {
			flush()
			name, typ = m[1], m[2]
			usage.WriteString(m[3])
			continue
		}
		if strings.TrimSpace(line) == "" || !strings.HasPrefix(line, " ") {
			flush()
			continue
		}
		usage.WriteString(" " + strings.TrimSpace(line))
	}
	flush()
	return entries
}

// TestParseHelp: the parser reads what pflag prints, including multi-line
// usage and defaults with spaces or quotes.
func TestParseHelp(t *testing.T) {
	got := parseHelp(t, `Usage:
  kube-proxy [flags]

Flags:
      --bind-address ip                              Overrides kube-proxy's idea. (default 0.0.0.0)
      --cleanup                                      If true cleanup iptables and ipvs rules and exit.
      --feature-gates mapStringBool                  A set of key=value pairs. Options are:
                                                     AllAlpha=true|false (ALPHA - default=false)
      --kube-api-content-type string                 Content type. (default "application/vnd.kubernetes.protobuf")
  -v, --v Level                                      number for the log level verbosity
      --version version[=true]                       --version prints version information and quits
`)
	want := map[string]helpFlag{
		"bind-address":          {Type: "ip", Default: "0.0.0.0"},
		"cleanup":               {},
		"feature-gates":         {Type: "mapStringBool"},
		"kube-api-content-type": {Type: "string", Default: `"application/vnd.kubernetes.protobuf"`},
		"v":                     {Type: "Level"},
		"version":               {Type: "version[=true]"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("parseHelp (-want +got):\n%s", diff)
	}
}

// ourOwnFlags are flags upstream does not have.
var ourOwnFlags = map[string]string{
	"ipvs-virtual-server-metrics": "per-Service IPVS counters, README 'Where we deliberately differ'",
	"ipvs-rules-backend":          "the nftables rules backend, docs/ARCHITECTURE.md (issue 16)",
	"ipvs-config":                 "our own settings in a KubeProxyIPVSConfiguration file, README Flags and configuration",
	"ipvs-warm-start":             "programming the first lists as they arrive, docs/BEHAVIOR.md 'Start-up'",
}

// TestFlagDefaultsMatchUpstreamHelp compares every flag of our --help with
// upstream v1.37.2's: same names, same types, same defaults as printed.
func TestFlagDefaultsMatchUpstreamHelp(t *testing.T) {
	data, err := os.ReadFile(upstreamHelpFile)
	if err != nil {
		t.Fatalf("%v (regenerate with hack/update-upstream-help.sh)", err)
	}
	upstream := parseHelp(t, string(data))
	if len(upstream) < 50 {
		t.Fatalf("%s parsed into %d flags; upstream v1.37.2 has more than 50", upstreamHelpFile, len(upstream))
	}
	code, out, errOut := run(t, "--help")
	if code != 0 {
		t.Fatalf("--help exited %d: %s", code, errOut)
	}
	ours := parseHelp(t, out)
	for name, want := range upstream {
		got, ok := ours[name]
		if !ok {
			t.Errorf("--%s: upstream has it (%s, default %q), our --help does not", name, want.Type, want.Default)
			continue
		}
		if got != want {
			t.Errorf("--%s: ours is %s with default %q, upstream's %s with default %q", name, got.Type, got.Default, want.Type, want.Default)
		}
	}
	for name := range ours {
		if _, ok := upstream[name]; !ok && ourOwnFlags[name] == "" {
			t.Errorf("--%s: ours only, and not listed in ourOwnFlags", name)
		}
	}
}

// ourHelpTexts are the flags whose help text differs from upstream's on purpose
// (after upstream's "This parameter is ignored if a config file is specified by
// --config.", which is not true here: a flag given on the command line overrides the
// file), with the reason.
var ourHelpTexts = map[string]string{
	"config":               "says what the file is and that flags override it",
	"proxy-mode":           "this daemon implements the ipvs mode only",
	"feature-gates":        "lists the gates kube-proxy reads; every Kubernetes gate name is accepted (README)",
	"detect-local-mode":    "names the modes",
	"write-config-to":      "writes the effective configuration (flags and file), as upstream does, whatever its text says",
	"metrics-bind-address": "says that empty disables the server, as upstream behaves",
	"healthz-bind-address": "says that empty disables the server, as upstream behaves",
}

// TestHelpTextsMatchUpstream: every flag upstream has is described with upstream's
// words, except those in ourHelpTexts.
func TestHelpTextsMatchUpstream(t *testing.T) {
	upstreamText, err := os.ReadFile(upstreamHelpFile)
	if err != nil {
		t.Fatal(err)
	}
	var ours bytes.Buffer
	if err := NewProxyCommand([]string{"--help"}, &ours, &ours).Execute(); err != nil {
		t.Fatal(err)
	}
	ignored := regexp.MustCompile(` ?This parameter is ignored if a config file is specified by --config\.`)
	up, our := usageTexts(string(upstreamText)), usageTexts(ours.String())
	for name, text := range up {
		text = ignored.ReplaceAllString(text, "")
		switch differs := our[name] != text; {
		case differs && ourHelpTexts[name] == "":
			t.Errorf("--%s: help differs from upstream's without a reason in ourHelpTexts:\n  upstream: %s\n  ours:     %s", name, text, our[name])
		case !differs && ourHelpTexts[name] != "":
			t.Errorf("--%s: listed in ourHelpTexts but says what upstream says", name)
		}
	}
}

// usageTexts reads --help output into each flag's usage text, pflag's
// "(default ...)" left out.
func usageTexts(text string) map[string]string {
	out := map[string]string{}
	for name, e := range helpEntries(text) {
		u := e.usage
		if i := strings.LastIndex(u, " (default "); i >= 0 && strings.HasSuffix(u, ")") {
			u = u[:i]
		}
		out[name] = u
	}
	return out
}
