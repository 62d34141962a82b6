#!/usr/bin/env bash
# Writes a small gzip'ed newc cpio holding the given files, to be appended to
# the cached base initramfs (the kernel unpacks concatenated archives).
# Usage: mkcpio.sh OUT.cpio.gz SRC=DST [SRC=DST...]   (DST absolute in the guest)
set -euo pipefail
out=$1
shift
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
for spec in "$@"; do
	src=${spec%%=*}
	dst=${spec#*=}
	mkdir -p "$stage$(dirname "$dst")"
	cp -L "$src" "$stage$dst"
done
(cd "$stage" && find . -mindepth 1 | LC_ALL=C sort | cpio -o -H newc --quiet -R 0:0) | gzip -1 >"$out"
