package metricsdoc

import (
	"errors"
	"fmt"
	"strings"
)

// section is one generated table of the metrics reference. Each family goes to the
// first section whose match accepts it; the prose around the tables is written by
// hand in docs/OPERATIONS.md.
type section struct {
	id    string
	match func(Family) bool
	// noted sections have a "What it tells you" column, from operatorNotes, and every
	// family in them must have a note.
	noted bool
}

// sections, in the order a family is matched against them (the last takes the rest).
var sections = []section{
	{id: "virtual-server", noted: true, match: func(f Family) bool { return f.Optional == VirtualServerMetricsFlag }},
	{id: "ipvs", noted: true, match: func(f Family) bool { return strings.HasPrefix(f.Name, "kubeproxy_ipvs_") }},
	{id: "upstream", noted: true, match: func(f Family) bool { return strings.HasPrefix(f.Name, "kubeproxy_") }},
	{id: "process", match: func(f Family) bool { return strings.HasPrefix(f.Name, "process_") }},
	{id: "go", match: func(f Family) bool { return strings.HasPrefix(f.Name, "go_") }},
	{id: "client", match: func(Family) bool { return true }},
}

// Markers around each generated table in the doc.
const (
	beginMarker = "<!-- BEGIN GENERATED metrics %s: hack/update-metrics-doc.sh; edit notes in hack/metricsdoc/notes.go -->"
	endMarker   = "<!-- END GENERATED metrics %s -->"
)

// Render returns each section's table (markers excluded), by section id.
func Render(families []Family) (map[string]string, error) {
	bySection := map[string][]Family{}
	for _, f := range families {
		for _, s := range sections {
			if s.match(f) {
				bySection[s.id] = append(bySection[s.id], f)
				break
			}
		}
	}
	out := map[string]string{}
	var errs []error
	for _, s := range sections {
		var b strings.Builder
		if s.noted {
			b.WriteString("| Metric | Type | Labels | Help (as served) | What it tells you |\n|---|---|---|---|---|\n")
		} else {
			b.WriteString("| Metric | Type | Labels | Help (as served) |\n|---|---|---|---|\n")
		}
		for _, f := range bySection[s.id] {
			fmt.Fprintf(&b, "| `%s` | %s | %s | %s |", f.Name, f.Type, labelCell(f.Labels), cell(f.Help))
			if s.noted {
				note, ok := operatorNotes[f.Name]
				if !ok {
					errs = append(errs, fmt.Errorf("%s: no operator note in hack/metricsdoc/notes.go", f.Name))
				}
				fmt.Fprintf(&b, " %s |", cell(note))
			}
			b.WriteString("\n")
		}
		out[s.id] = b.String()
	}
	served := map[string]bool{}
	for _, f := range families {
		served[f.Name] = true
	}
	for name := range operatorNotes {
		if !served[name] {
			errs = append(errs, fmt.Errorf("%s: has an operator note but is not served", name))
		}
	}
	return out, errors.Join(errs...)
}

func labelCell(labels []string) string {
	if len(labels) == 0 {
		return "–"
	}
	return "`" + strings.Join(labels, "`, `") + "`"
}

// cell makes text safe in a Markdown table cell.
func cell(s string) string {
	return strings.NewReplacer("|", `\|`, "\n", " ", "<", "&lt;", ">", "&gt;").Replace(s)
}

// Splice replaces the body of every generated section of doc with tables. It fails
// when a section's markers are missing, or doc has a generated section Render does
// not know.
func Splice(doc string, tables map[string]string) (string, error) {
	for _, s := range sections {
		begin, end := fmt.Sprintf(beginMarker, s.id), fmt.Sprintf(endMarker, s.id)
		i := strings.Index(doc, begin)
		j := strings.Index(doc, end)
		if i < 0 || j < i {
			return "", fmt.Errorf("the doc has no %q ... %q section", begin, end)
		}
		doc = doc[:i+len(begin)] + "\n" + tables[s.id] + doc[j:]
	}
	if n := strings.Count(doc, "<!-- BEGIN GENERATED metrics "); n != len(sections) {
		return "", fmt.Errorf("the doc has %d generated metrics sections, want %d", n, len(sections))
	}
	return doc, nil
}
