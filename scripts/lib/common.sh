# Shared helpers for the scripts in this folder. Source it; do not run it.

# The Debian packages apn-worker needs at build and test time.
APN_WORKER_DEBIAN_PACKAGES=(librdkafka-dev libhiredis-dev libjemalloc-dev libssl-dev redis-server openssl pkg-config)
# Also needed by the tests: Python with venv, for the independent HTTP/2 peer (Tests/Peers), gdb,
# with which scripts/test shows the threads of a test run that is stuck, and tinyproxy's binary
# (tinyproxy-bin, without the package that runs it as a system service), the HTTP proxy of the
# CONNECT tunnel tests, which start their own instances on 127.0.0.1, and iproute2, whose
# `ip netns` gives each worker of the partition tests a network namespace of its own.
APN_WORKER_TEST_DEBIAN_PACKAGES=(python3 python3-venv gdb tinyproxy-bin iproute2)
# And `kubectl kustomize`, to render deploy/k8s (MonitoringFilesTests): Debian's kubectl, unless a
# kubectl or kustomize is already on PATH.
APN_WORKER_TEST_KUBECTL_PACKAGE=kubernetes-client

# Installs whichever of the packages above is missing (Debian/Ubuntu), and puts Swift on PATH.
ensure_dependencies() {
    local missing=()
    local pkg
    local wanted=("${APN_WORKER_DEBIAN_PACKAGES[@]}")
    if [[ "${1:-}" == "--tests" ]]; then wanted+=("${APN_WORKER_TEST_DEBIAN_PACKAGES[@]}"); fi
    for pkg in "${wanted[@]}"; do
        if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
            missing+=("$pkg")
        fi
    done
    if [[ "${1:-}" == "--tests" ]] && ! command -v kubectl >/dev/null 2>&1 && ! command -v kustomize >/dev/null 2>&1; then
        missing+=("$APN_WORKER_TEST_KUBECTL_PACKAGE")
    fi
    if ((${#missing[@]} > 0)); then
        echo "==> installing missing packages: ${missing[*]}" >&2
        local sudo=""
        if [[ $(id -u) -ne 0 ]]; then sudo="sudo"; fi
        $sudo apt-get update -qq
        DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
    fi
    if [[ "${1:-}" == "--tests" ]]; then ensure_prometheus_tools; fi
    if ! command -v swift >/dev/null 2>&1; then
        if [[ -x /opt/swift/usr/bin/swift ]]; then
            export PATH="/opt/swift/usr/bin:$PATH"
        else
            echo "error: Swift is not installed; install a Swift 6.2 (or later) toolchain and put 'swift' on PATH" >&2
            exit 1
        fi
    fi
}

# promtool, which checks and unit-tests deploy/prometheus (MonitoringFilesTests), and the
# Prometheus server, which scrapes two workers with deploy/prometheus/alerts.yaml loaded
# (PrometheusEndToEndTests): each one not on PATH is taken from Debian's prometheus package,
# unpacked into .build/tools (installing the package would also install and start a Prometheus
# server as a system service).
ensure_prometheus_tools() {
    local tools
    tools="$(project_root)/.build/tools"
    local missing=()
    local tool
    for tool in promtool prometheus; do
        if ! command -v "$tool" >/dev/null 2>&1 && [[ ! -x "$tools/$tool" ]]; then missing+=("$tool"); fi
    done
    if ((${#missing[@]} == 0)); then return; fi
    echo "==> unpacking ${missing[*]} from Debian's prometheus package into .build/tools" >&2
    local scratch
    scratch=$(mktemp -d)
    if ! (cd "$scratch" && apt-get download -qq prometheus 2>/dev/null); then
        local sudo=""
        if [[ $(id -u) -ne 0 ]]; then sudo="sudo"; fi
        $sudo apt-get update -qq
        (cd "$scratch" && apt-get download -qq prometheus)
    fi
    dpkg-deb -x "$scratch"/prometheus_*.deb "$scratch/unpacked"
    mkdir -p "$tools"
    for tool in "${missing[@]}"; do
        cp "$scratch/unpacked/usr/bin/$tool" "$tools/$tool"
    done
    rm -rf "$scratch"
}

# One build configuration for tests, demo and benchmarks, so they share one build: optimised
# (the delivery tests push tens of thousands of notifications through TLS on two cores), with
# -enable-testing so that test targets can use @testable imports, and APN_WORKER_TEST_HOOKS, which
# compiles in the faults that end-to-end tests inject into worker processes (a worker that exits
# while it processes a chosen job, docs/operations.md "Messages that stop workers"). A build
# without it (the container image's) has no such hooks.
SWIFT_BUILD_FLAGS=(-c release -Xswiftc -enable-testing -Xswiftc -DAPN_WORKER_TEST_HOOKS)

# The project root.
project_root() {
    cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd
}
