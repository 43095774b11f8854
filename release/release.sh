#!/usr/bin/env bash
# Release every published module (release/modules) at one version.
#
#   release/release.sh [VERSION]            set, commit, tag, prove
#   release/release.sh --dry-run [VERSION]  the same in a throwaway clone of HEAD
#   release/release.sh --set VERSION        only set the version in every go.mod
#   release/release.sh --check              every go.mod names release/version
#
# VERSION defaults to release/version's. A release writes VERSION to
# release/version, makes every module of the repository require its published
# siblings at VERSION, commits that if it changed anything, tags each published
# module (VERSION for the root, DIR/VERSION for the module in DIR), then proves
# the tags with release/proxy-check.sh: each module fetched from a module proxy
# made of the tags, as a user fetches it. A proof that fails removes the tags.
# Nothing is pushed: the script prints the push command.
#
# A VERSION already tagged at HEAD is only proved again. A VERSION tagged at
# another commit is refused, except by the dry run, which moves the tags in its
# clone, so that it proves HEAD whatever is tagged.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
module_root=github.com/idem-go/idem

die() { echo "release: $*" >&2; exit 1; }

published_dirs() { grep -v '^\s*\(#\|$\)' "$here/modules"; }

tag_of() { # tag_of DIR VERSION
	if [[ "$1" == . ]]; then echo "$2"; else echo "$1/$2"; fi
}

valid_version() {
	[[ "$1" =~ ^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$ ]] ||
		die "version $1 is not of the form vMAJOR.MINOR.PATCH[-PRERELEASE]"
	[[ "$1" =~ ^v[01]\. ]] || die "version $1: a major version above v1 needs a /vN module path"
}

# go.mod files of every module of the repository, the development-only ones too.
all_gomods() {
	(cd "$root" && git ls-files -- 'go.mod' '*/go.mod')
}

# sibling_requirements GOMOD: "path version" for each requirement on a module
# of this repository.
sibling_requirements() {
	awk -v root="$module_root" '
		/^require[ \t]*\(/ { block = 1; next }
		block && /^\)/ { block = 0; next }
		{
			line = $0
			sub(/\/\/.*/, "", line)
			n = split(line, f, /[ \t]+/)
			i = 1
			while (i <= n && f[i] == "") i++
			if (!block) { if (f[i] != "require") next; i++ }
			if (f[i] == root || index(f[i], root "/") == 1) print f[i], f[i+1]
		}' "$1"
}

set_version() { # set_version VERSION
	local v="$1" gomod path have
	echo "$v" >"$here/version"
	while read -r gomod; do
		while read -r path have; do
			if [[ "$have" != "$v" ]]; then
				(cd "$root/$(dirname "$gomod")" && go mod edit -require="$path@$v")
			fi
		done < <(sibling_requirements "$root/$gomod")
	done < <(all_gomods)
}

check() { # check VERSION: every requirement on a sibling names VERSION
	local v="$1" gomod path have bad=0
	while read -r gomod; do
		while read -r path have; do
			if [[ "$have" != "$v" ]]; then
				echo "$gomod requires $path $have, not $v (release/version)" >&2
				bad=1
			fi
		done < <(sibling_requirements "$root/$gomod")
	done < <(all_gomods)
	((bad == 0)) || die "run release/release.sh --set $v"
}

release() { # release VERSION, in this repository
	local v="$1" dir tag head tags=() made=()
	cd "$root"
	[[ -z "$(git status --porcelain)" ]] || die "the work tree has uncommitted changes"
	head="$(git rev-parse HEAD)"
	for dir in $(published_dirs); do
		tag="$(tag_of "$dir" "$v")"
		tags+=("$tag")
		if git rev-parse -q --verify "refs/tags/$tag" >/dev/null; then
			[[ "$(git rev-parse "$tag^{commit}")" == "$head" ]] ||
				die "$tag is already tagged, at $(git rev-parse --short "$tag^{commit}"), not HEAD: release another version"
		fi
	done

	set_version "$v"
	if [[ -n "$(git status --porcelain)" ]]; then
		git commit -q -am "Release $v: every module requires its published siblings at $v"
		echo "release: committed $(git rev-parse --short HEAD): the requirements on $v"
	fi
	head="$(git rev-parse HEAD)"
	for tag in "${tags[@]}"; do
		if ! git rev-parse -q --verify "refs/tags/$tag" >/dev/null; then
			git tag -a -m "idem $v" "$tag" "$head"
			made+=("$tag")
		fi
	done
	if ! bash "$here/proxy-check.sh" "$v" "$root"; then
		if ((${#made[@]})); then
			git tag -d "${made[@]}" >/dev/null
		fi
		die "the proof of $v failed; the tags are removed, the commit is left"
	fi
	echo "release: $v tagged and proved: ${tags[*]}"
	if [[ -z "${RELEASE_DRY_RUN:-}" ]]; then
		echo "release: publish with: git push origin HEAD ${tags[*]}"
	fi
}

mode=release
case "${1:-}" in
--dry-run | --set | --check) mode="${1#--}"; shift ;;
-*) die "unknown flag $1 (want --dry-run, --set or --check)" ;;
esac
version="${1:-$(tr -d ' \t\r\n' <"$here/version")}"
(($# <= 1)) || die "too many arguments"
valid_version "$version"

case "$mode" in
check) check "$version" ;;
set) set_version "$version" ;;
release) release "$version" ;;
dry-run)
	if [[ -n "$(git -C "$root" status --porcelain)" ]]; then
		echo "release: the dry run takes HEAD; uncommitted changes are not in it" >&2
	fi
	tmp="$(mktemp -d)"
	trap 'rm -rf "$tmp"' EXIT
	git clone -q "$root" "$tmp/repo"
	# A version already released, at an earlier commit, is released again in
	# the clone from HEAD: the dry run proves what HEAD would give users.
	for dir in $(published_dirs); do
		tag="$(tag_of "$dir" "$version")"
		if git -C "$tmp/repo" rev-parse -q --verify "refs/tags/$tag" >/dev/null &&
			[[ "$(git -C "$tmp/repo" rev-parse "$tag^{commit}")" != "$(git -C "$tmp/repo" rev-parse HEAD)" ]]; then
			echo "release: $tag is tagged at an earlier commit; the dry run tags HEAD in its clone (set the next version with --set)" >&2
			git -C "$tmp/repo" tag -d "$tag" >/dev/null
		fi
	done
	# A clone on a machine with no git identity can still commit and tag.
	export GIT_AUTHOR_NAME="${GIT_AUTHOR_NAME:-release dry run}" GIT_AUTHOR_EMAIL="${GIT_AUTHOR_EMAIL:-release@localhost}"
	export GIT_COMMITTER_NAME="${GIT_COMMITTER_NAME:-release dry run}" GIT_COMMITTER_EMAIL="${GIT_COMMITTER_EMAIL:-release@localhost}"
	RELEASE_DRY_RUN=1 bash "$tmp/repo/release/release.sh" "$version"
	echo "release: dry run of $version passed (nothing changed here)"
	;;
esac
