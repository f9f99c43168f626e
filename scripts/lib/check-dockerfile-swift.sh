#!/usr/bin/env bash
# Fails, with a sentence saying what to change, when deploy/Dockerfile builds with an older Swift
# than the code needs. The code needs the swift-tools-version on the first line of Package.swift
# (an older toolchain refuses the package); the Dockerfile builds on swift:<version>-…, its
# version given by `ARG SWIFT_VERSION=<version>` (or written in the FROM line itself).
#   scripts/lib/check-dockerfile-swift.sh [PROJECT_ROOT]   (default: this script's project)
set -euo pipefail
root=${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
manifest=$root/Package.swift
dockerfile=$root/deploy/Dockerfile

fail() {
    echo "error: $*" >&2
    exit 1
}

# Whether version $1 is older than version $2, comparing numeric components (6.10 is newer than
# 6.9; 6.2 is 6.2.0).
older() {
    local -a a b
    IFS=. read -r -a a <<<"$1"
    IFS=. read -r -a b <<<"$2"
    local i
    for ((i = 0; i < 3; i++)); do
        local x=$((10#${a[i]:-0})) y=$((10#${b[i]:-0}))
        if ((x != y)); then
            ((x < y))
            return
        fi
    done
    return 1
}

[[ -f $manifest ]] || fail "no Package.swift in $root"
[[ -f $dockerfile ]] || fail "no deploy/Dockerfile in $root"
needed=$(sed -n -E '1s#^//[[:space:]]*swift-tools-version[[:space:]]*:[[:space:]]*([0-9]+(\.[0-9]+)*).*$#\1#p' "$manifest")
[[ -n $needed ]] || fail "the first line of Package.swift does not say its swift-tools-version"

# The build stage: FROM swift:<tag> [AS name], the tag written out or starting with ${SWIFT_VERSION}.
image=$(awk 'toupper($1) == "FROM" && $2 ~ /^swift:/ { print $2; exit }' "$dockerfile")
[[ -n $image ]] || fail "deploy/Dockerfile has no build stage FROM swift:<version>-…"
tag=${image#swift:}
if [[ $tag == "\${SWIFT_VERSION}"* || $tag == "\$SWIFT_VERSION"* ]]; then
    version=$(sed -n -E 's/^ARG[[:space:]]+SWIFT_VERSION=([0-9]+(\.[0-9]+)*)[[:space:]]*$/\1/p' "$dockerfile" | head -n1)
    [[ -n $version ]] || fail "deploy/Dockerfile builds FROM $image but has no ARG SWIFT_VERSION=<version> (such as ARG SWIFT_VERSION=$needed) to give it a default"
    where="ARG SWIFT_VERSION=$version"
else
    version=$(grep -oE '^[0-9]+(\.[0-9]+)*' <<<"$tag" || true)
    [[ -n $version ]] || fail "deploy/Dockerfile builds FROM $image, which does not name a Swift version; use swift:\${SWIFT_VERSION}-bookworm with ARG SWIFT_VERSION=$needed"
    where="FROM $image"
fi

if older "$version" "$needed"; then
    fail "deploy/Dockerfile builds with Swift $version ($where), but the code needs Swift $needed or later (swift-tools-version in Package.swift), so the image cannot build; set ARG SWIFT_VERSION=$needed or later in deploy/Dockerfile"
fi
echo "==> deploy/Dockerfile builds with Swift $version; the code needs Swift $needed or later"
