#!/usr/bin/env bash
# Create (if needed) a virtualenv holding the PyPI packages the independent
# HTTP/2 test peer (h2_peer.py) needs, and print the venv's python path.
#
# Usage: install-peer.sh VENV_DIR        e.g. install-peer.sh .build/h2-peer-venv
# Last line of output: absolute path of VENV_DIR/bin/python.
set -euo pipefail

if [ $# -ne 1 ] || [ -z "$1" ]; then
    echo "usage: $0 VENV_DIR" >&2
    exit 2
fi
venv="$1"
py="$venv/bin/python"

if [ -x "$py" ] && "$py" -c "import h2, cryptography" >/dev/null 2>&1; then
    echo "$(cd "$venv" && pwd)/bin/python"
    exit 0
fi

if [ ! -x "$py" ]; then
    existed=0; [ -e "$venv" ] && existed=1
    mkdir -p "$(dirname "$venv")"
    if ! python3 -m venv "$venv" >/dev/null 2>&1; then
        [ "$existed" = 0 ] && rm -rf "$venv"   # drop only what we just made
        echo "error: 'python3 -m venv' failed; install it with 'apt-get install python3-venv' and run this again." >&2
        exit 1
    fi
fi

"$py" -m pip install --quiet --disable-pip-version-check "h2>=4.1,<5" "cryptography>=41"
"$py" -c "import h2, cryptography"
echo "$(cd "$venv" && pwd)/bin/python"
