#!/usr/bin/env bash
# Builds (once) the root filesystem of our container image from Debian packages,
# without a container registry: the runtime stage of the Dockerfile (its last
# FROM) is replayed with mmdebstrap. The Dockerfile stays the one source of truth:
#
#   FROM debian:SUITE[-slim]   -> mmdebstrap --variant=minbase SUITE, with the
#                                 Debian image's apt/dpkg settings (-slim: no
#                                 docs, man pages or locales)
#   RUN ...                    -> run verbatim with /bin/sh -c in the chroot
#                                 (the same apt-get install and update-alternatives)
#   COPY [--chmod=MODE] SRC DST -> the build context's file SRC (the Dockerfile's
#                                 folder; one regular file) installed at DST,
#                                 root-owned, MODE or SRC's mode, between the
#                                 RUNs around it (the iptables wrapper)
#   COPY --from=build SRC DST  -> DST is where the daemon goes; the harness puts
#                                 our bin/kube-proxy there on every run
#   ENTRYPOINT [...]           -> recorded
#   ARG NAME[=DEFAULT]         -> recorded (--plan: "arg: NAME=DEFAULT")
#   LABEL KEY=VALUE ...        -> recorded unexpanded (--plan: "label: KEY=VALUE");
#                                 image metadata, neither in the root filesystem
#                                 nor in its cache key (hack/release.sh sets them)
#
# Any other instruction in that stage stops the script: teach it first.
#
# Usage: hack/image-rootfs.sh --plan prints what it read from the Dockerfile
#        hack/image-rootfs.sh        prints the cache entry DIR, which holds
#   DIR/image/          the root filesystem (without the daemon)
#   DIR/image.cpio.zst  the same as a newc cpio whose paths start with image/
#                       (appended to the e2e VM's initramfs: /image in the guest;
#                       zstd because the guest kernel unpacks it under TCG:
#                       ~10 s less per boot than gzip)
#   DIR/binary-path     the COPY destination (/usr/local/bin/kube-proxy)
#   DIR/entrypoint      the ENTRYPOINT, one word per line
#   DIR/manifest.txt    inputs, suites' Release dates, package versions,
#                       alternatives, tool versions
#
# The entry is keyed by the stage's FROM, RUN and COPY text (package list and
# alternatives) with each copied file's mode and sha256, the architecture, the
# mirrors and this script's recipe number;
# it is rebuilt only when one of them changes (or KPI_IMAGE_REBUILD=1), not when
# Debian publishes updates: the manifest names the suites' Release dates. Downloaded .debs are
# kept in $KPI_CACHE/image/debs for the next rebuild.
#
# Environment: KPI_CACHE (default /var/cache/kube-proxy-ipvs), KPI_IMAGE_ARCH
# (Debian architecture, default the host's; see "A foreign architecture" below),
# KPI_IMAGE_MIRROR (default
# http://deb.debian.org; e.g. http://snapshot.debian.org/archive to pin with
# KPI_IMAGE_SNAPSHOT=20250520T000000Z), KPI_DOCKERFILE (default ./Dockerfile).
#
# A foreign architecture (KPI_IMAGE_ARCH=arm64 on an amd64 host) runs no binary
# of that architecture (no QEMU, no binfmt_misc): its entry is derived from the
# host architecture's entry, whose RUN did run. Every architecture-dependent
# package the native root filesystem holds is replaced by the foreign build of
# the same version (a different binNMU suffix, +bN, is accepted: binNMUs are per
# architecture) from the same sources: its files removed (dpkg's file list), the
# foreign .deb unpacked (with the -slim excludes), dpkg's status and info files
# rewritten to it. Everything the maintainer scripts and the RUN made
# (alternatives, users, the CA bundle, ...) stays as the native run made it,
# except /etc/ld.so.cache (the native libraries' cache; the foreign ld.so finds
# its libraries in its default directories without it). The manifest lists each
# substitution; its "# tools" section is not run.
#
# KPI_IMAGE_REBUILD=1 hack/image-rootfs.sh rebuilds the entry (fresh Debian
# updates). Needs root, mmdebstrap and zstd (hack/install-deps.sh). mmdebstrap --mode=root
# works in a throwaway directory: it mounts /proc, /sys and /dev into it while
# it runs and changes nothing else on the host.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dockerfile=${KPI_DOCKERFILE:-$root/Dockerfile}
[[ -f $dockerfile ]] || { echo "[image] FAIL: no Dockerfile at $dockerfile" >&2; exit 1; }
context=$(cd "$(dirname "$dockerfile")" && pwd)
cache=${KPI_CACHE:-/var/cache/kube-proxy-ipvs}
host_arch=$(dpkg --print-architecture)
arch=${KPI_IMAGE_ARCH:-$host_arch}
mirror=${KPI_IMAGE_MIRROR:-http://deb.debian.org}
log() { echo "[image] $*" >&2; }
die() { log "FAIL: $*"; exit 1; }

# The runtime stage as logical instructions, one per line (NUL-separated):
# comment lines dropped (also inside continuations, as docker does), lines
# ending in a backslash joined.
stage_instructions() {
	awk '
		/^[ \t]*#/ { next }
		{
			line = $0
			if (cont != "") line = cont " " line
			if (line ~ /\\[ \t]*$/) { sub(/\\[ \t]*$/, "", line); cont = line; next }
			cont = ""
			if (line ~ /^[ \t]*$/) next
			if (toupper(line) ~ /^[ \t]*FROM[ \t]/) { n = 0 }
			inst[n++] = line
		}
		END { for (i = 0; i < n; i++) printf "%s%c", inst[i], 0 }
	' "$1"
}

from='' binary_path='' entrypoint=''
# steps: the RUN and COPY instructions in order, as "run CMD" or
# "copy MODE SHA256 SRC DST"; runs: the RUN commands alone.
runs=() steps=() args=() labels=()
while IFS= read -r -d '' inst; do
	inst=$(sed -E 's/^[[:space:]]+//; s/[[:space:]]+/ /g' <<<"$inst")
	kw=${inst%% *}
	rest=${inst#* }
	case ${kw^^} in
	FROM) from=$rest ;;
	RUN)
		[[ $rest != \[* ]] || die "RUN in exec form is not handled: $inst"
		runs+=("$rest")
		steps+=("run $rest")
		;;
	COPY)
		read -r -a w <<<"$rest"
		if [[ ${#w[@]} -eq 3 && ${w[0]} == --from=build ]]; then
			binary_path=${w[2]}
			continue
		fi
		# COPY [--chmod=MODE] SRC DST: one file of the build context.
		mode=''
		if [[ ${w[0]} =~ ^--chmod=([0-7]{3,4})$ ]]; then
			mode=${BASH_REMATCH[1]}
			w=("${w[@]:1}")
		fi
		[[ ${#w[@]} -eq 2 && ${w[0]} != -* && ${w[0]} != /* && /${w[0]}/ != */../* && ${w[1]} == /* && ${w[1]} != */ ]] ||
			die "only 'COPY --from=build SRC DST' and 'COPY [--chmod=MODE] FILE /PATH' (a file of the build context to a file path) are handled: $inst"
		src=$context/${w[0]}
		[[ -f $src && ! -L $src ]] || die "COPY: $src is not a regular file of the build context $context"
		[[ -n $mode ]] || mode=$(stat -c %a "$src")
		mode=$(printf '%04o' "$((8#$mode))")
		steps+=("copy $mode $(sha256sum "$src" | cut -c1-64) ${w[0]} ${w[1]}")
		;;
	ENTRYPOINT)
		entrypoint=$(sed -E 's/^\[//; s/\]$//; s/"//g; s/, */\n/g' <<<"$rest")
		;;
	ARG)
		[[ $rest =~ ^[A-Za-z_][A-Za-z0-9_]*(=[^[:space:]]*)?$ ]] || die "only 'ARG NAME[=DEFAULT]' is handled: $inst"
		args+=("$rest")
		;;
	LABEL)
		# KEY=VALUE pairs, VALUE bare or in double quotes (no escapes); the
		# legacy 'LABEL KEY VALUE' form is refused.
		l=$rest
		while [[ -n $l ]]; do
			[[ $l =~ ^([A-Za-z0-9._/-]+)=(\"([^\"\\]*)\"|([^\"[:space:]]+))([[:space:]]+(.*))?$ ]] ||
				die "only 'LABEL KEY=VALUE ...' (VALUE bare or \"quoted\", no escapes) is handled: $inst"
			labels+=("${BASH_REMATCH[1]}=${BASH_REMATCH[3]}${BASH_REMATCH[4]}")
			l=${BASH_REMATCH[6]}
		done
		;;
	*) die "$dockerfile: instruction $kw of the runtime stage is not handled by $0" ;;
	esac
done < <(stage_instructions "$dockerfile")

[[ $from =~ ^debian:([a-z]+)(-slim)?$ ]] || die "runtime stage FROM '$from': want debian:SUITE or debian:SUITE-slim"
suite=${BASH_REMATCH[1]}
slim=${BASH_REMATCH[2]:+yes}
((${#runs[@]} > 0)) || die "no RUN in the runtime stage of $dockerfile"
[[ -n $binary_path ]] || die "no 'COPY --from=build' in the runtime stage of $dockerfile"

# The Debian image's sources: SUITE and SUITE-updates from debian, SUITE-security
# from debian-security (debian:bookworm-slim's /etc/apt/sources.list.d/debian.sources).
if [[ -n ${KPI_IMAGE_SNAPSHOT:-} ]]; then
	sources=("deb [check-valid-until=no] $mirror/debian/$KPI_IMAGE_SNAPSHOT $suite $suite-updates main"
		"deb [check-valid-until=no] $mirror/debian-security/$KPI_IMAGE_SNAPSHOT $suite-security main")
else
	sources=("deb $mirror/debian $suite $suite-updates main"
		"deb $mirror/debian-security $suite-security main")
fi

# Bump when the way this script builds changes (a new key rebuilds: minutes).
recipe=1
entry_for() {
	local key
	key=$({
		echo "$recipe $from"
		printf '%s\n' "${steps[@]}" "$1" "${sources[@]}"
	} | sha256sum | cut -c1-12)
	echo "$cache/image/$suite-$1-$key"
}
out=$(entry_for "$arch")

if [[ ${1:-} == --plan ]]; then
	echo "from: $from"
	for st in "${steps[@]}"; do
		case $st in
		run\ *) echo "run: ${st#run }" ;;
		copy\ *) echo "copy: ${st#copy }" ;;
		esac
	done
	echo "binary: $binary_path"
	echo "entrypoint: $(tr '\n' ' ' <<<"$entrypoint")"
	if ((${#args[@]})); then printf 'arg: %s\n' "${args[@]}"; fi
	if ((${#labels[@]})); then printf 'label: %s\n' "${labels[@]}"; fi
	printf 'source: %s\n' "${sources[@]}"
	echo "entry: $out"
	if [[ $arch != "$host_arch" ]]; then echo "derived from: the $host_arch entry"; fi
	exit 0
fi
# A foreign entry is also stale once the native one it was derived from is rebuilt.
ready() {
	[[ -f "$out/manifest.txt" && -f "$out/image.cpio.zst" && ${KPI_IMAGE_REBUILD:-0} != 1 ]] &&
		{ [[ $arch == "$host_arch" ]] || [[ "$out/manifest.txt" -nt "$(entry_for "$host_arch")/manifest.txt" ]]; }
}
if ready; then
	echo "$out"
	exit 0
fi
[[ $(id -u) -eq 0 ]] || die "building the image root filesystem needs root (mmdebstrap --mode=root)"
if [[ $arch != "$host_arch" ]]; then
	# The native entry as it is (built if missing): KPI_IMAGE_REBUILD=1 rebuilds
	# only the entry asked for, so a release that asks for amd64 then arm64
	# runs mmdebstrap once.
	native=$(KPI_IMAGE_ARCH=$host_arch KPI_IMAGE_REBUILD=0 "${BASH_SOURCE[0]}")
	# shellcheck source=hack/image-rootfs-foreign.sh
	source "$root/hack/image-rootfs-foreign.sh"
	exit 0
fi
command -v mmdebstrap >/dev/null || die "mmdebstrap missing: run hack/install-deps.sh"
mkdir -p "$cache/image/debs"
# Concurrent runs wait for each other instead of building twice.
exec 9>"$cache/image/.lock"
flock 9
if ready; then
	echo "$out"
	exit 0
fi

# The cpio is derived from image/: (re)packed without rebuilding.
pack() {
	(cd "$out" && find image | LC_ALL=C sort | cpio -o -H newc --quiet) | zstd -q -T0 >"$out/image.cpio.zst.tmp"
	mv "$out/image.cpio.zst.tmp" "$out/image.cpio.zst"
	rm -f "$out/image.cpio.gz"
}
if [[ -f "$out/manifest.txt" && ${KPI_IMAGE_REBUILD:-0} != 1 ]]; then
	pack
	log "packed $out/image.cpio.zst ($(du -h "$out/image.cpio.zst" | cut -f1))"
	echo "$out"
	exit 0
fi

start=$SECONDS
log "building the image root filesystem ($from + ${#runs[@]} RUN, $arch) into $out"
rm -rf "$out"
mkdir -p "$out"
work=$(mktemp -d "$cache/image/work.XXXXXX")
trap 'rm -rf "$work"' EXIT

opts=(--mode=root --variant=minbase --format=directory --arch="$arch"
	# /bin, /sbin and /lib are symlinks into /usr as in Debian's images (without
	# it mmdebstrap installs the usrmerge package, and perl with it).
	--hook-dir=/usr/share/mmdebstrap/hooks/merged-usr
	# What Debian's container images set (debuerreotype): no translations,
	# unsafe dpkg I/O (nothing to lose in a build).
	--aptopt='Acquire::Languages "none"'
	--dpkgopt=force-unsafe-io)
if [[ -n $slim ]]; then
	# debuerreotype-slimify, as in debian:SUITE-slim.
	for p in doc groff info linda lintian/overrides locale man; do
		opts+=("--dpkgopt=path-exclude=/usr/share/$p/*")
	done
	opts+=(--dpkgopt='path-include=/usr/share/doc/*/copyright' --dpkgopt='path-include=/usr/share/locale/locale.alias')
fi
# Reuse the .debs of earlier builds, and keep the ones this build fetches.
# shellcheck disable=SC2016 # $1 is the hook's argument (the chroot)
opts+=(--setup-hook='mkdir -p "$1"/var/cache/apt/archives'
	--setup-hook="sync-in $cache/image/debs /var/cache/apt/archives")
# The suites' Release dates: what "the Debian of this build" was.
opts+=(--customize-hook="grep -h -E '^(Suite|Date):' \"\$1\"/var/lib/apt/lists/*Release >$work/apt-dates")
i=0
for st in "${steps[@]}"; do
	i=$((i + 1))
	case $st in
	run\ *)
		printf '%s\n' "${st#run }" >"$work/run-$i"
		# As docker runs RUN: /bin/sh -c, as root, in /, with the image's PATH.
		opts+=(--customize-hook="chroot \"\$1\" env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root /bin/sh -c \"\$(cat $work/run-$i)\"")
		;;
	copy\ *)
		read -r _ mode sum src dst <<<"$st"
		# The file as it was keyed (a later edit of the context cannot slip in).
		cp "$context/$src" "$work/copy-$i"
		[[ $(sha256sum "$work/copy-$i" | cut -c1-64) == "$sum" ]] || die "COPY $src changed while the build started"
		# As docker's COPY: owned by root, parent folders created.
		opts+=(--customize-hook="install -D -o 0 -g 0 -m $mode $work/copy-$i \"\$1\"$dst")
		;;
	esac
done
opts+=(--customize-hook="sync-out /var/cache/apt/archives $cache/image/debs")
mmdebstrap "${opts[@]}" "$suite" "$work/image" "${sources[@]}" >"$work/mmdebstrap.log" 2>&1 || {
	tail -40 "$work/mmdebstrap.log" >&2
	die "mmdebstrap failed (log above)"
}
find "$cache/image/debs" -name '*.deb' -mtime +30 -delete
log "mmdebstrap done in $((SECONDS - start)) s"

img=$work/image
[[ ! -e "$img$binary_path" ]] || die "$binary_path already exists in the image before COPY"
printf '%s\n' "$binary_path" >"$work/binary-path"
printf '%s\n' "$entrypoint" >"$work/entrypoint"
{
	echo "# image root filesystem built by hack/image-rootfs.sh on $(date -u +%FT%TZ)"
	echo "from: $from"
	echo "arch: $arch"
	printf 'source: %s\n' "${sources[@]}"
	for st in "${steps[@]}"; do
		case $st in
		run\ *) echo "run: ${st#run }" ;;
		copy\ *) echo "copy: ${st#copy }" ;;
		esac
	done
	echo "binary: $binary_path"
	echo "# the suites as apt saw them before the RUNs"
	cat "$work/apt-dates"
	echo "# alternatives"
	for a in iptables ip6tables arptables ebtables; do
		if [[ -L "$img/etc/alternatives/$a" ]]; then echo "$a -> $(readlink "$img/etc/alternatives/$a")"; fi
	done
	echo "# tools"
	# (not ipvsadm: even --version loads ip_vs into the running kernel; not
	# iptables: the image's is a wrapper that would probe this machine's rules
	# and pick its backend for good)
	for t in "iptables-legacy --version" "iptables-nft --version" "ipset --version" "conntrack --version" "nft --version" "kmod --version"; do
		# shellcheck disable=SC2086 # a command and its flag
		echo "$t: $(chroot "$img" $t 2>&1 | head -1)"
	done
	echo "# packages"
	# shellcheck disable=SC2016 # dpkg-query's format
	chroot "$img" dpkg-query -W -f '${Package} ${Version}\n'
} >"$work/manifest.txt"
mv "$work/image" "$work/binary-path" "$work/entrypoint" "$work/manifest.txt" "$out/"
pack
# Older entries (other package lists or script versions) are dead weight.
for old in "$cache/image/"*-"$arch"-*; do
	if [[ -d $old && $old != "$out" ]]; then rm -rf "$old"; fi
done
log "image root filesystem $(du -sh "$out/image" | cut -f1) ($(du -h "$out/image.cpio.zst" | cut -f1) as cpio.zst) built in $((SECONDS - start)) s"
echo "$out"
