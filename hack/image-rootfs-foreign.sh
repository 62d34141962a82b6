# shellcheck shell=bash
# Sourced by hack/image-rootfs.sh for a foreign architecture ($arch != $host_arch):
# derives the entry $out from the native entry $native without running a binary of
# $arch (see "A foreign architecture" in hack/image-rootfs.sh). Uses its variables:
# root, cache, arch, host_arch, sources, slim, out, native, log, die, ready.

mkdir -p "$cache/image/debs"
exec 9>"$cache/image/.lock"
flock 9
if ready; then
	echo "$out"
	exit 0
fi
start=$SECONDS
log "deriving the $arch root filesystem from $native (no $arch binary runs)"
rm -rf "$out"
mkdir -p "$out"
work=$(mktemp -d "$cache/image/work.XXXXXX")
trap 'rm -rf "$work"' EXIT

# The host's apt with a state of its own, for $arch's indexes of the same sources.
a=$work/apt
mkdir -p "$a/lists/partial" "$a/cache/archives/partial"
: >"$a/status"
printf '%s\n' "${sources[@]}" >"$a/sources.list"
apt_opts=(-q -o "Dir::State=$a" -o "Dir::State::Lists=$a/lists" -o "Dir::State::status=$a/status"
	-o "Dir::Cache=$a/cache" -o "Dir::Etc::SourceList=$a/sources.list" -o Dir::Etc::SourceParts=/dev/null
	-o Dir::Etc::Preferences=/dev/null -o Dir::Etc::PreferencesParts=/dev/null
	-o "APT::Architecture=$arch" -o "APT::Architectures=$arch" -o Acquire::Languages=none
	-o Debug::NoLocking=1 -o APT::Sandbox::User=root)
apt-get "${apt_opts[@]}" update >"$work/apt.log" 2>&1 || {
	tail -20 "$work/apt.log" >&2
	die "apt-get update for $arch failed"
}

cp -a "$native/image" "$work/image"
img=$work/image
# The packages' files are removed and unpacked through the image's directory
# symlinks (/lib -> usr/lib, as dpkg does on merged /usr): inside_image dies unless
# the directory of each path (one per line on stdin, from the image's root)
# resolves inside the image, so nothing outside it is ever touched.
inside_image() {
	local bad
	bad=$(sed -E 's|/[^/]*$||; s|^|'"$img"'/|' | LC_ALL=C sort -u | xargs -d '\n' realpath -m -- | grep -v -x -F "$img" | grep -v "^$img/" | head -3) || true
	[[ -z $bad ]] || die "$pkg: a path leads out of the image ($bad)"
}
info=$img/var/lib/dpkg/info
dpkg-query --admindir="$img/var/lib/dpkg" -W -f '${Package}\t${Architecture}\t${Version}\t${Multi-Arch}\n' >"$work/native-packages"
mkdir -p "$work/stanza"
: >"$work/substitutions"
while IFS=$'\t' read -r pkg parch ver ma; do
	[[ $parch == "$host_arch" ]] || continue
	# The same version, or the same one with another binNMU suffix.
	fver=$(apt-cache "${apt_opts[@]}" madison "$pkg" | awk -F' [|] ' -v v="$ver" '
		function base(s) { sub(/\+b[0-9]+$/, "", s); return s }
		{ gsub(/ /, "", $2) }
		$2 == v { exact = $2 }
		base($2) == base(v) && same == "" { same = $2 }
		END { print (exact != "" ? exact : same) }')
	[[ -n $fver ]] || die "$pkg $ver: no $arch build of that version in ${sources[*]} (rebuild the $host_arch entry: KPI_IMAGE_REBUILD=1)"
	deb=$cache/image/debs/${pkg}_${fver//:/%3a}_$arch.deb
	if [[ ! -f $deb ]]; then
		(cd "$cache/image/debs" && apt-get "${apt_opts[@]}" download "$pkg:$arch=$fver" </dev/null >>"$work/apt.log" 2>&1) ||
			die "apt-get download $pkg:$arch=$fver failed (see $work/apt.log)"
	fi
	[[ -f $deb ]] || die "apt-get download did not write $deb"
	# Out with the native files (directories stay: other packages share them) ...
	prefix=$pkg
	[[ -f "$info/$pkg:$host_arch.list" ]] && prefix=$pkg:$host_arch
	inside_image <"$info/$prefix.list"
	while IFS= read -r f; do
		# (a symlink to a directory, /lib on merged /usr, is a directory to dpkg)
		if [[ ! -d "$img$f" && (-L "$img$f" || -e "$img$f") ]]; then rm -f "$img$f"; fi
	done <"$info/$prefix.list"
	# Directories left empty go, as dpkg removes them (deepest first).
	LC_ALL=C sort -r "$info/$prefix.list" | while IFS= read -r f; do
		if [[ $f != /. && -d "$img$f" && ! -L "$img$f" ]]; then rmdir --ignore-fail-on-non-empty "$img$f"; fi
	done
	for s in list md5sums conffiles preinst postinst prerm postrm triggers shlibs symbols templates config; do
		rm -f "$info/$prefix.$s"
	done
	# ... in with the foreign ones, less the files the -slim dpkg excludes drop
	# (dpkg keeps their directories).
	x=$work/x
	rm -rf "$x"
	dpkg-deb -x "$deb" "$x"
	for p in doc groff info linda lintian/overrides locale man; do
		if [[ -n $slim && -d $x/usr/share/$p ]]; then
			find "$x/usr/share/$p" -mindepth 1 \( -type f -o -type l \) ! -path "$x/usr/share/doc/*/copyright" ! -path "$x/usr/share/locale/locale.alias" -delete
		fi
	done
	# Into existing directories and through directory symlinks, as dpkg unpacks.
	(cd "$x" && find . -mindepth 1) | sed 's|^\./||' | inside_image
	(cd "$x" && tar -cf - .) | tar -C "$img" -xpf - --keep-directory-symlink --no-overwrite-dir
	prefix=$pkg
	[[ $ma == same ]] && prefix=$pkg:$arch
	dpkg-deb --fsys-tarfile "$deb" | tar -t | sed -E 's|^\./|/|; s|/$||; s|^$|/.|' >"$info/$prefix.list"
	ctrl=$work/ctrl
	rm -rf "$ctrl"
	dpkg-deb -e "$deb" "$ctrl"
	for f in "$ctrl"/*; do
		if [[ ${f##*/} != control ]]; then cp -p "$f" "$info/$prefix.${f##*/}"; fi
	done
	# The status stanza: the foreign control fields, the native conffiles' state.
	{
		echo "Package: $pkg"
		echo "Status: install ok installed"
		grep -v '^Package:' "$ctrl/control"
		conf=$(dpkg-query --admindir="$native/image/var/lib/dpkg" -W -f '${Conffiles}' "$pkg")
		if [[ -n $conf ]]; then printf 'Conffiles:\n%s\n' "$conf"; fi
	} >"$work/stanza/$pkg"
	echo "$pkg $ver -> $fver" >>"$work/substitutions"
done <"$work/native-packages"
awk -v dir="$work/stanza" 'BEGIN { RS = ""; ORS = "\n\n" }
	{
		split($0, l, "\n"); f = dir "/" substr(l[1], 10)
		if ((getline line <f) > 0) { s = line; while ((getline line <f) > 0) s = s "\n" line; close(f); print s }
		else print $0
	}' "$img/var/lib/dpkg/status" >"$work/status"
cat "$work/status" >"$img/var/lib/dpkg/status"
rm -f "$img/var/lib/dpkg/status-old"
echo "$arch" >"$img/var/lib/dpkg/arch"
rm -f "$img/etc/ld.so.cache"

cp "$native/binary-path" "$native/entrypoint" "$work/"
{
	echo "# image root filesystem derived by hack/image-rootfs.sh on $(date -u +%FT%TZ)"
	echo "# from the $host_arch entry $(basename "$native"), whose manifest follows up to its packages"
	sed -n '/^# tools/q; /^# image root filesystem/d; s/^arch: .*/arch: '"$arch"'/; p' "$native/manifest.txt"
	echo "derived from: $(basename "$native")"
	echo "# replaced with the $arch build (native version -> $arch version)"
	cat "$work/substitutions"
	echo "# tools: not run (a foreign architecture)"
	echo "# packages"
	# shellcheck disable=SC2016 # dpkg-query's format
	dpkg-query --admindir="$img/var/lib/dpkg" -W -f '${Package} ${Version}\n'
} >"$work/manifest.txt"
mv "$work/image" "$work/binary-path" "$work/entrypoint" "$work/manifest.txt" "$out/"
(cd "$out" && find image | LC_ALL=C sort | cpio -o -H newc --quiet) | zstd -q -T0 >"$out/image.cpio.zst"
for old in "$cache/image/"*-"$arch"-*; do
	if [[ -d $old && $old != "$out" ]]; then rm -rf "$old"; fi
done
log "$arch root filesystem $(du -sh "$out/image" | cut -f1) derived in $((SECONDS - start)) s ($(wc -l <"$work/substitutions") packages replaced)"
echo "$out"
