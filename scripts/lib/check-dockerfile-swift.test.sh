#!/usr/bin/env bash
# Exercises check-dockerfile-swift.sh: the project as it is passes; small projects in a temporary
# directory whose Dockerfile builds on an older Swift than their Package.swift's
# swift-tools-version fail, with the sentence that says so, and those on the same or a newer one
# pass. scripts/test runs it.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
check=$here/check-dockerfile-swift.sh
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
failures=0

# project TOOLS_VERSION DOCKERFILE_LINES...: a Package.swift of that tools version and a
# Dockerfile of those lines, in $scratch/project.
project() {
    rm -rf "$scratch/project"
    mkdir -p "$scratch/project/deploy"
    printf '// swift-tools-version: %s\nimport PackageDescription\n' "$1" >"$scratch/project/Package.swift"
    shift
    printf '%s\n' "$@" "FROM debian:bookworm-slim" 'ENTRYPOINT ["/usr/local/bin/apn-worker"]' \
        >"$scratch/project/deploy/Dockerfile"
}

# expect NAME passes|fails [MESSAGE] [ROOT]: runs the check on ROOT (the prepared project).
expect() {
    local name=$1 outcome=$2 message=${3:-} root=${4:-$scratch/project} status=0 output
    output=$("$check" "$root" 2>&1) || status=$?
    if [[ $outcome == passes && $status -ne 0 ]] || [[ $outcome == fails && $status -eq 0 ]]; then
        echo "FAIL: $name: expected the check to $outcome (exit status $status): $output" >&2
        failures=$((failures + 1))
    elif [[ -n $message && $output != *"$message"* ]]; then
        echo "FAIL: $name: expected \"$message\" in: $output" >&2
        failures=$((failures + 1))
    fi
}

expect "the project as it is" passes "" "$(cd "$here/../.." && pwd)"

from='FROM swift:${SWIFT_VERSION}-bookworm AS build'
project 6.2 "ARG SWIFT_VERSION=6.0" "$from"
expect "ARG SWIFT_VERSION=6.0 against tools 6.2" fails \
    "error: deploy/Dockerfile builds with Swift 6.0 (ARG SWIFT_VERSION=6.0), but the code needs Swift 6.2 or later"

project 6.2 "FROM swift:6.0-bookworm AS build"
expect "FROM swift:6.0-bookworm against tools 6.2" fails "builds with Swift 6.0 (FROM swift:6.0-bookworm)"

project 6.2 "ARG SWIFT_VERSION" "$from"
expect "ARG SWIFT_VERSION without a default" fails "has no ARG SWIFT_VERSION=<version>"

project 6.2 "FROM swift:latest AS build"
expect "FROM swift:latest" fails "does not name a Swift version"

project 6.2 "ARG SWIFT_VERSION=6.1.3" "$from"
expect "6.1.3 against tools 6.2" fails "needs Swift 6.2 or later"

project 6.2 "ARG SWIFT_VERSION=6.2" "$from"
expect "6.2 against tools 6.2" passes

project 6.2 "ARG SWIFT_VERSION=6.2.1" "FROM swift:\$SWIFT_VERSION-bookworm AS build"
expect "6.2.1 against tools 6.2" passes

project 6.9 "ARG SWIFT_VERSION=6.10" "$from"
expect "6.10 against tools 6.9 (numbers, not text)" passes

project 6.2.0 "FROM swift:6.2-noble"
expect "6.2 against tools 6.2.0" passes

if ((failures > 0)); then
    echo "error: check-dockerfile-swift.sh failed $failures of its tests" >&2
    exit 1
fi
echo "==> check-dockerfile-swift.sh passes its tests"
