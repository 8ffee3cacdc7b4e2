# SPDX-License-Identifier: MIT
# Sourced by the scripts that fetch Debian packages or sources from another
# suite (build-python.sh, build-backend.sh, sid-python.sh, auditwheel.sh): apt with a
# private state and cache directory, so the machine's own apt
# configuration and lists stay as they were.
#
#   apt_private DIR "deb URI SUITE main"   sets APT_OPTS (an array) for
#       apt-get with DIR as its whole state; extra -o options may follow.
#   apt_mirror_uri                          the Debian archive's URI from
#       this machine's apt sources: the entry for a plain suite name (not
#       -updates, -security, -backports) with component main.
#   apt_stage NAME CMD...                    under the lock $cache/.lock-NAME
#       (cache: the caller's cache folder): where another run made the
#       cache meanwhile (the caller's cached()), runs CMD and exits 0;
#       else sets tmp (a fresh $cache/.NAME.XXXXXX, stale ones removed,
#       this one removed at exit) and uri (apt_mirror_uri's, or die).
#   apt_unpack URIS DEBS ROOT [QUIET]      each package of URIS (apt-get
#       --print-uris download's lines: 'URL' file size SHA256:hash, from
#       the index whose Release file apt verified) downloaded into DEBS by
#       apt-helper, its sha256 checked again, unpacked into ROOT with
#       dpkg-deb -x (no maintainer script runs) and listed in
#       ROOT/.jitring-debs; QUIET=1 keeps apt-helper's progress off
#       stderr.  Sets APT_UNPACKED to the count; calls die on a failure.

apt_mirror_uri() {
	apt-get indextargets --no-release-info \
		--format '$(REPO_URI) $(RELEASE) $(COMPONENT)' 2>/dev/null |
		awk '$2 ~ /^[a-z]+$/ && $3 == "main" { print $1; exit }'
}

apt_private() {
	local dir=$1 line=$2
	shift 2
	mkdir -p "$dir/lists/partial" "$dir/cache/archives/partial" \
		"$dir/sources.list.d" "$dir/preferences.d"
	: >"$dir/status"
	echo "$line" >"$dir/sources.list"
	APT_OPTS=(-o "Dir::Etc::SourceList=$dir/sources.list"
		  -o "Dir::Etc::SourceParts=$dir/sources.list.d"
		  -o "Dir::Etc::Preferences=$dir/preferences"
		  -o "Dir::Etc::PreferencesParts=$dir/preferences.d"
		  -o "Dir::State::Lists=$dir/lists"
		  -o "Dir::State::status=$dir/status"
		  -o "Dir::Cache=$dir/cache"
		  -o "Debug::NoLocking=1"
		  -o "APT::Sandbox::User=root" "$@")
}

apt_stage() {
	local name=$1
	shift
	mkdir -p "$cache"
	exec 9>"$cache/.lock-$name"
	flock 9
	if cached; then			# another run finished it while we waited
		"$@"
		exit 0
	fi
	rm -rf "$cache/.$name".*
	tmp=$(mktemp -d "$cache/.$name.XXXXXX")
	trap 'rm -rf "$tmp"' EXIT
	trap 'exit 130' INT TERM HUP
	uri=$(apt_mirror_uri) || uri=
	[ -n "$uri" ] || die "no Debian 'main' entry in this machine's apt sources (apt-get indextargets)"
}

apt_unpack() {
	local uris=$1 debs=$2 root=$3 quiet=${4:-0} url file size hash
	mkdir -p "$debs" "$root"
	APT_UNPACKED=0
	while read -r url file size hash; do
		url=${url//\'/}
		case "$hash" in
		SHA256:*) ;;
		*) die "apt gave no sha256 for $file ($hash)" ;;
		esac
		[ "$quiet" = 1 ] || log "downloading $file ($size bytes)"
		if [ "$quiet" = 1 ]; then
			/usr/lib/apt/apt-helper -o "APT::Sandbox::User=root" \
				download-file "$url" "$debs/$file" "$hash" >/dev/null 2>&1
		else
			/usr/lib/apt/apt-helper -o "APT::Sandbox::User=root" \
				download-file "$url" "$debs/$file" "$hash" >&2
		fi || die "download of $file failed"
		echo "${hash#SHA256:}  $debs/$file" | sha256sum --quiet -c - ||
			die "$file: sha256 mismatch"
		dpkg-deb -x "$debs/$file" "$root"
		echo "$file $hash" >>"$root/.jitring-debs"
		APT_UNPACKED=$((APT_UNPACKED + 1))
	done < <(grep "^'" <<<"$uris")
}
