#!/usr/bin/env bash
# Prove that a tagged version installs as a user installs it:
#
#   release/proxy-check.sh VERSION [REPO]
#
# builds a module proxy on the file system (release/modproxy) from REPO's tags
# of VERSION for every published module (release/modules), then, in a scratch
# module outside the repository, with no network: `go get`s each module at
# VERSION and builds a program importing it, and `go install`s idemq at VERSION
# and runs `idemq -h`. Third-party modules come from the local module cache,
# which serves as a second proxy (the earlier CI steps fill it); the scratch
# module has a module cache of its own, so a version made earlier is never
# taken in place of this one.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
version="${1:?usage: release/proxy-check.sh VERSION [REPO]}"
repo="$(cd "${2:-$here/..}" && pwd)"
module_root=github.com/idem-go/idem

tmp="$(mktemp -d)"
trap 'chmod -R u+w "$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT
cache="$(go env GOMODCACHE)/cache/download"

step() { echo "proxy-check: $*"; }
# quiet CMD...: run CMD, showing what it printed only if it fails.
quiet() { "$@" >"$tmp/out" 2>&1 || { cat "$tmp/out" >&2; echo "proxy-check: failed: $*" >&2; return 1; }; }

dirs=()
while read -r dir; do dirs+=("$dir"); done < <(grep -v '^\s*\(#\|$\)' "$here/modules")

(cd "$here" && GOWORK=off go build -o "$tmp/modproxy" ./modproxy)
"$tmp/modproxy" -repo "$repo" -version "$version" -out "$tmp/proxy" "${dirs[@]}"
step "proxy of $version: $(cd "$tmp/proxy" && find . -name "$version.zip" | sed 's|^\./||; s|/@v/.*||' | sort | tr '\n' ' ')"

# As a user: only the proxy, no checksum database, no workspace, this Go.
export GOPROXY="file://$tmp/proxy,file://$cache" GOSUMDB=off GOWORK=off GOTOOLCHAIN=local
export GOMODCACHE="$tmp/modcache" GOFLAGS=-modcacherw GONOSUMDB= GONOSUMCHECK= GOPRIVATE= GONOPROXY=

mkdir "$tmp/scratch"
cd "$tmp/scratch"
go mod init example.com/scratch >/dev/null 2>&1
imports=()
for dir in "${dirs[@]}"; do
	path="$module_root"
	[[ "$dir" == . ]] || path="$module_root/$dir"
	[[ "$dir" == cmd/* ]] && continue # commands are installed, below
	quiet go get "$path@$version"
	imports+=("$path")
	got="$(go list -m -f '{{.Version}} {{.Dir}}' "$path")"
	[[ "$got" == "$version $GOMODCACHE/"* ]] || { echo "proxy-check: $path resolved to $got, not $version from the proxy" >&2; exit 1; }
done
{
	echo "package main"
	echo
	for path in "${imports[@]}"; do echo "import _ \"$path\""; done
	echo
	echo "func main() {}"
} >main.go
quiet go build -o /dev/null .
step "go get and build in a scratch module: ${imports[*]}"

for dir in "${dirs[@]}"; do
	[[ "$dir" == cmd/* ]] || continue
	name="$(basename "$dir")"
	(cd "$tmp" && export GOBIN="$tmp/bin" && quiet go install "$module_root/$dir@$version")
	help="$("$tmp/bin/$name" -h 2>&1)" || { echo "$help" >&2; echo "proxy-check: $name -h failed" >&2; exit 1; }
	if [[ "$name" == idemq ]]; then
		for want in "Available Commands:" " ls " " show " " drain "; do
			[[ "$help" == *"$want"* ]] || { echo "proxy-check: idemq -h does not name \"$want\":" >&2; echo "$help" >&2; exit 1; }
		done
	fi
	step "go install $module_root/$dir@$version; $name -h names $(awk '/^Available Commands:/ { f = 1; next } f && /^$/ { exit } f' <<<"$help" | wc -l) commands"
done
