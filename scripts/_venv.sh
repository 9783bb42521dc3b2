# Sourced by scripts/serve and scripts/test: make .venv (once) and install tfunnel into it.
# Usage: ensure_venv [EXTRAS]   e.g. ensure_venv test
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
PYTHON="${PYTHON:-python3}"

ensure_venv() {
    local extras="${1:-}"
    if [ ! -x "$VENV/bin/python" ]; then
        "$PYTHON" -m venv "$VENV"
        "$VENV/bin/python" -m pip install --quiet --upgrade pip
    fi
    local target="$ROOT"
    [ -n "$extras" ] && target="$ROOT[$extras]"
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -e "$target"
}
