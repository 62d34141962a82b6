package main

import (
	"bufio"
	"fmt"
	"os"
	"strings"
)

// plan is what hack/image-rootfs.sh --plan read from the Dockerfile's runtime
// stage: the script is the one reader of the Dockerfile, this tool does not
// parse it a second time.
type plan struct {
	from string
	runs []string
	// steps are the RUN and COPY instructions, in order, as the history prints them.
	steps      []string
	binary     string
	entrypoint []string
	args       map[string]string // ARG NAME[=DEFAULT]
	labels     [][2]string       // LABEL KEY=VALUE, unexpanded, in order
}

func parsePlan(text string) (plan, error) {
	p := plan{args: map[string]string{}}
	for _, line := range strings.Split(text, "\n") {
		key, value, ok := strings.Cut(line, ": ")
		if !ok {
			continue
		}
		switch key {
		case "from":
			p.from = value
		case "run":
			p.runs = append(p.runs, value)
			p.steps = append(p.steps, "RUN "+value)
		case "copy":
			p.steps = append(p.steps, "COPY "+value)
		case "binary":
			p.binary = value
		case "entrypoint":
			p.entrypoint = strings.Fields(value)
		case "arg":
			name, def, _ := strings.Cut(value, "=")
			p.args[name] = def
		case "label":
			k, v, ok := strings.Cut(value, "=")
			if !ok {
				return p, fmt.Errorf("label line %q", line)
			}
			p.labels = append(p.labels, [2]string{k, v})
		}
	}
	if p.from == "" || p.binary == "" || len(p.entrypoint) == 0 {
		return p, fmt.Errorf("plan without from, binary or entrypoint")
	}
	return p, nil
}

// expandLabels substitutes ${NAME} and $NAME as docker does in LABEL: from
// the build arguments given, else the ARG's default; a name that is no ARG of
// the stage is an error rather than an empty string.
func (p plan) expandLabels(buildArgs map[string]string) (map[string]string, error) {
	labels := map[string]string{}
	for _, kv := range p.labels {
		var missing []string
		v := os.Expand(kv[1], func(name string) string {
			def, declared := p.args[name]
			if !declared {
				missing = append(missing, name)
				return ""
			}
			if v, ok := buildArgs[name]; ok {
				return v
			}
			return def
		})
		if len(missing) > 0 {
			return nil, fmt.Errorf("LABEL %s uses %v, not an ARG of the runtime stage", kv[0], missing)
		}
		labels[kv[0]] = v
	}
	return labels, nil
}

// history is the image config's record of how the layer was made.
func (p plan) history() string {
	return fmt.Sprintf("FROM %s; %s; COPY --from=build %s (hack/image-rootfs.sh, hack/release.sh)",
		p.from, strings.Join(p.steps, "; "), p.binary)
}

// suite is the Debian suite of the runtime stage's base (debian:SUITE[-slim]).
func (p plan) suite() string {
	s := strings.TrimPrefix(p.from, "debian:")
	return strings.TrimSuffix(s, "-slim")
}

// debPackage is one line of the "# packages" section of a root filesystem's
// manifest.txt (dpkg-query's Package and Version).
type debPackage struct{ name, version string }

func readManifestPackages(path string) ([]debPackage, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var pkgs []debPackage
	in := false
	s := bufio.NewScanner(f)
	for s.Scan() {
		line := s.Text()
		if strings.HasPrefix(line, "#") {
			in = line == "# packages"
			continue
		}
		if !in {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 2 {
			return nil, fmt.Errorf("%s: package line %q", path, line)
		}
		pkgs = append(pkgs, debPackage{f[0], f[1]})
	}
	if err := s.Err(); err != nil {
		return nil, err
	}
	if len(pkgs) == 0 {
		return nil, fmt.Errorf("%s: no packages", path)
	}
	return pkgs, nil
}
