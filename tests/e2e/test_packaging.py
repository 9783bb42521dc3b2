"""The wheel ships the seed home inside the package, so an installed tfunnel can seed a home."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.timeout(120)


def test_wheel_contains_the_seed_home_and_howto_topics(tmp_path: Path) -> None:
    """`conf/` is packaged as `tfunnel/_seed` (no bytecode caches) next to the howto topics."""
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "--no-build-isolation",
                    "-q", "-w", str(tmp_path)], check=True, timeout=100)
    [wheel] = tmp_path.glob("tfunnel-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for required in ("tfunnel/_seed/toolfunnel.json", "tfunnel/_seed/tools/tools.register.json",
                     "tfunnel/_seed/tools/scripts/_tool_io.py", "tfunnel/_seed/tools/scripts/danger.py",
                     "tfunnel/_seed/mcp/expose.json", "tfunnel/_seed/hooks/hooks.manifest.json",
                     "tfunnel/surface/howto/create-tool.md"):
        assert required in names
    assert not [n for n in names if "__pycache__" in n and "_seed" in n]
    # The admin UI's page and every asset it loads ship in the package (no CDN, no build step).
    static = ROOT / "tfunnel" / "ui" / "static"
    assets = {f"tfunnel/ui/static/{f.relative_to(static).as_posix()}" for f in static.rglob("*")
              if f.is_file()}
    assert "tfunnel/ui/static/index.html" in assets and assets <= names
