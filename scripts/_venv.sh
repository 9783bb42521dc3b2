# Sourced by scripts/serve and scripts/test: make .venv (once) and install tfunnel into it.
# Usage: ensure_venv [EXTRAS]   e.g. ensure_venv test
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
PYTHON="${PYTHON:-python3}"

# The install is editable: code and conf/ changes need none. What it depends on is pyproject.toml
# (dependencies, entry points) and the extras asked for; a stamp of those skips a no-op install.
install_stamp() {
    local extras="$1"
    echo "$extras $(sha256sum "$ROOT/pyproject.toml" | cut -d' ' -f1) $("$VENV/bin/python" -c 'import sys; print(sys.version.split()[0])')"
}

ensure_venv() {
    local extras="${1:-}"
    if [ ! -x "$VENV/bin/python" ]; then
        echo "== creating $VENV (the first run installs tfunnel's dependencies: about a minute)" >&2
        "$PYTHON" -m venv "$VENV"
        "$VENV/bin/python" -m pip install --quiet --upgrade pip
    fi
    local stamp_file="$VENV/.tfunnel-installed"
    local stamp
    stamp="$(install_stamp "$extras")"
    # A stamp for more extras covers fewer (`test` includes everything `serve` needs).
    if [ -f "$stamp_file" ]; then
        local have
        have="$(cat "$stamp_file")"
        if [ "$have" = "$stamp" ] || { [ -z "$extras" ] && [ "${have#* }" = "${stamp#* }" ]; }; then
            return 0
        fi
    fi
    local target="$ROOT"
    [ -n "$extras" ] && target="$ROOT[$extras]"
    echo "== installing tfunnel${extras:+[$extras]} into $VENV (pyproject.toml changed, or first run)" >&2
    rm -f "$stamp_file"
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -e "$target"
    echo "$stamp" > "$stamp_file"
}
