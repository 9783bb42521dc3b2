"""The hooks bench (`bench/hooks_bench.py`) runs end to end in its quick mode: three gateways in
front of the fast upstream, no hook, a command hook and an http hook; one table. No timings are
asserted (they belong to the machine, not to the code)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "hooks_bench.py"

pytestmark = [pytest.mark.timeout(240),
              pytest.mark.skipif(shutil.which("node") is None, reason="the fast upstream needs node")]


def test_quick_mode_reports_the_three_gateways() -> None:
    """--quick measures each gateway (every call allowed by its hook) and prints the table."""
    env = {**os.environ, "PYTHONPATH": str(BENCH.parents[1])}
    done = subprocess.run([sys.executable, str(BENCH), "--quick", "--json"], capture_output=True, text=True,
                          timeout=200, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    rows = [line.split("|")[1].strip() for line in lines if line.startswith("| ") and "µs" in line]
    assert rows == ["no hook", "command hook", "http hook"]
    assert any(line.startswith("Target: an http hook adds ≤ 1 ms at p50: ") for line in lines)
    assert '"calls": 20' in lines[-1] and '"calls": 4' in lines[-1]
