#!/usr/bin/env bash
# Lint: gofmt (any unformatted file fails), go mod tidy, go vet, the import rules, no
# function over 100 lines (hack/funclen) and staticcheck (pinned in hack/tools/go.mod).
# Run from anywhere: `make lint`.
set -euo pipefail
cd "$(dirname "$0")/.."

GO="${GO:-go}"
status=0

echo ">> gofmt -l"
# Every tracked and untracked-but-not-ignored Go file, wherever its module lives.
mapfile -t gofiles < <(git ls-files --cached --others --exclude-standard -- '*.go' 2>/dev/null || find . -name '*.go' -not -path './_output/*')
if ((${#gofiles[@]})); then
	unformatted="$(gofmt -l "${gofiles[@]}")"
	if [[ -n "$unformatted" ]]; then
		echo "gofmt: these files need formatting (run gofmt -w):" >&2
		echo "$unformatted" >&2
		status=1
	fi
fi

echo ">> go mod tidy -diff"
# go.mod and go.sum say exactly what the code imports (a direct import is not
# marked indirect, nothing unused is required).
if ! "$GO" mod tidy -diff; then
	echo "go.mod/go.sum are not tidy: run go mod tidy" >&2
	status=1
fi

echo ">> go vet ./..."
if ! "$GO" vet ./...; then
	status=1
fi
# The end-to-end and in-VM tests only build with their tags.
echo ">> go vet -tags e2e,e2escale,vmtest ./..."
if ! "$GO" vet -tags e2e,e2escale,vmtest ./...; then
	status=1
fi

echo ">> import rules"
# Dependencies point one way: cmd -> pkg/proxy/... -> pkg/util/...; pkg/util never
# imports pkg/proxy or cmd, pkg never imports cmd, and one rules backend
# (pkg/proxy/ipvs/rules/<name>) never imports another.
mod=github.com/kube-proxy-ipvs/kube-proxy-ipvs
if ! bad=$("$GO" list -f '{{.ImportPath}}{{range .Imports}} {{.}}{{end}}' ./pkg/... | awk -v m="$mod" '
	{
		from = $1
		for (i = 2; i <= NF; i++) {
			to = $i
			if (index(to, m "/") != 1) continue
			if (index(from, m "/pkg/util/") == 1 && (index(to, m "/pkg/proxy") == 1 || index(to, m "/cmd/") == 1)) print from " -> " to
			if (index(to, m "/cmd/") == 1) print from " -> " to
			if (match(from, "/pkg/proxy/ipvs/rules/[^/]+") && index(to, m "/pkg/proxy/ipvs/rules/") == 1) {
				fb = substr(from, RSTART, RLENGTH)
				if (index(to, m fb) != 1) print from " -> " to
			}
		}
	}' | sort -u); then
	echo "import rules: go list failed" >&2
	status=1
elif [[ -n $bad ]]; then
	echo "import rules broken (pkg/util never imports pkg/proxy or cmd; backends never import each other):" >&2
	echo "$bad" >&2
	status=1
fi

echo ">> function length (hack/funclen)"
# No function of pkg/, cmd/, hack/ or test/ over 100 lines, from func to the
# closing brace, but the listed exceptions (which may not grow).
if ! "$GO" run ./hack/funclen; then
	status=1
fi

echo ">> staticcheck (pinned in hack/tools/go.mod)"
# Built from the tools module, so its dependencies never change the daemon's.
# It must build: a lint that cannot run staticcheck fails.
staticcheck=$(mktemp -d)/staticcheck
if ! (cd hack/tools && "$GO" build -o "$staticcheck" honnef.co/go/tools/cmd/staticcheck); then
	echo "staticcheck: cannot build it from hack/tools (go.mod pins it)" >&2
	status=1
elif ! "$staticcheck" ./...; then
	status=1
fi

if ((status == 0)); then
	echo "lint: OK"
fi
exit "$status"
