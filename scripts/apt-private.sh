# SPDX-License-Identifier: MIT
# Sourced by the scripts that fetch Debian packages or sources from another
# suite (build-python.sh, build-backend.sh, sid-python.sh): apt with a
# private state and cache directory, so the machine's own apt
# configuration and lists stay as they were.
#
#   apt_private DIR "deb URI SUITE main"   sets APT_OPTS (an array) for
#       apt-get with DIR as its whole state; extra -o options may follow.
#   apt_mirror_uri                          the Debian archive's URI from
#       this machine's apt sources: the entry for a plain suite name (not
#       -updates, -security, -backports) with component main.

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
