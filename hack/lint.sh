#!/usr/bin/env bash
# Lint: gofmt (any unformatted file fails), go mod tidy, go vet, and staticcheck when it can be
# fetched through the Go module proxy. Run from anywhere: `make lint`.
set -euo pipefail
cd "$(dirname "$0")/.."

STATICCHECK_VERSION="${STATICCHECK_VERSION:-v0.8.2}"
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

echo ">> staticcheck ${STATICCHECK_VERSION}"
# `go run pkg@version` builds staticcheck from the module proxy into the build
# cache; if that is impossible here (offline, proxy refused), say so loudly and
# carry on rather than fail the whole lint on tooling.
if "$GO" run "honnef.co/go/tools/cmd/staticcheck@${STATICCHECK_VERSION}" -version >/dev/null 2>&1; then
	if ! "$GO" run "honnef.co/go/tools/cmd/staticcheck@${STATICCHECK_VERSION}" ./...; then
		status=1
	fi
else
	echo "##########################################################################" >&2
	echo "## NOTE: staticcheck ${STATICCHECK_VERSION} could not be installed here;  " >&2
	echo "## skipping it (gofmt and go vet still ran).                              " >&2
	echo "##########################################################################" >&2
fi

if ((status == 0)); then
	echo "lint: OK"
fi
exit "$status"
