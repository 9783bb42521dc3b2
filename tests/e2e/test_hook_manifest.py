"""The hook manifest, the process-level part: the real `tfunnel serve` command refusing to start
on a bad hook (its exit status, an empty stdout), and a `tfunnel hook disable` process whose write
a running gateway process picks up. The rest is tests/test_hook_manifest.py."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.hooks import EXIT2_DENY, set_hooks
from tests.test_hook_manifest import BAD_ROWS, MANIFEST, manifest_rows, run_tool, wait_for_log, write_manifest
from tests.wire import gateway, gateway_argv

pytestmark = pytest.mark.timeout(90)


@pytest.mark.parametrize(("bad", "field"), [c[1:] for c in BAD_ROWS], ids=[c[0] for c in BAD_ROWS])
def test_serve_refuses_to_start_with_a_bad_hook(home: Path, bad: dict[str, Any], field: str) -> None:
    """`tfunnel serve` exits 1 before serving, naming the bad hook on stderr; stdout stays empty."""
    rows = manifest_rows(home)
    write_manifest(home, {"version": 1, "hooks": [rows[0], bad]})
    done = subprocess.run([*gateway_argv(home), "serve"], stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, timeout=30)
    assert done.returncode == 1, done
    assert done.stdout == ""
    line = next(ln for ln in done.stderr.splitlines() if MANIFEST in ln)
    assert line.startswith(f"tfunnel: {MANIFEST}: hooks[1]") and field in line, line
    assert "refusing to start" in done.stderr


async def test_hook_disable_from_the_cli_applies_to_a_running_gateway(home: Path) -> None:
    """`tfunnel hook disable` while the gateway serves lets the next call run, without restart."""
    set_hooks(home, {"id": "no-hash", "matcher": "hash", "command": EXIT2_DENY})
    async with gateway(home) as wire:
        await wire.initialize()
        assert (await run_tool(wire, 1, "hash", {"text": "a"})).get("isError") is True
        mark = len(wire.stderr)
        done = await trio.run_process(gateway_argv(home, "hook", "disable", "no-hash"),
                                      capture_stdout=True, capture_stderr=True, check=False)
        assert done.returncode == 0, done.stderr
        await wait_for_log(wire, "hooks reloaded", mark)
        ran = await run_tool(wire, 2, "hash", {"text": "a"})
        assert not ran.get("isError") and ran["structuredContent"]["algo"] == "sha256"
