"""Config trust, the process-level part: a real `tfunnel serve --http` process whose live files
break and heal (the gate holds, /health degrades and recovers), and a real `tfunnel serve` that
starts without overlays and exits 0 at the end of its stdin. The rest is
tests/test_config_trust.py."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx2
import pytest
import trio
from mcp import Client

from tests.httpgw import http_gateway
from tests.test_config_trust import (
    BREAKS,
    HOOK_STATE,
    MANIFEST,
    STATE,
    TYPO_WARNING,
    break_file,
    guarded_home,
    write,
)
from tests.wire import gateway_argv
from tfunnel.testing.sdk import text

pytestmark = pytest.mark.timeout(120)


def tfunnel(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(gateway_argv(home, *args), stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, timeout=30)


async def health(http: httpx2.AsyncClient, url: str,
                 ready: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    """Poll `/health` until `ready(document)`; return that document."""
    with trio.fail_after(10):
        while True:
            document: dict[str, Any] = (await http.get(f"{url}/health")).json()
            if ready(document):
                return document
            await trio.sleep(0.02)


async def http_gate_holds(client: Client) -> None:
    denied = await client.call_tool("toolfunnel_run_tool", {"name": "danger", "args": {"x": 1}})
    disabled = await client.call_tool("toolfunnel_run_tool", {"name": "hash", "args": {"text": "a"}})
    assert denied.is_error and text(denied) == "exit-2 says no"
    assert disabled.is_error and "is disabled" in text(disabled)


@pytest.mark.parametrize("rel", [STATE, HOOK_STATE, MANIFEST])
async def test_a_broken_live_file_never_loosens_the_gate_over_http(home: Path, tmp_path: Path,
                                                                    rel: str) -> None:
    """The same breaks over HTTP: the gate holds and /health is degraded with one config error naming
    the file (line and column for a cut-off document) until the file is valid again. Unknown fields
    are listed in config.warnings and never degrade."""
    good = guarded_home(home)
    danger_log = tmp_path / "danger.log"
    env = {"TOOLFUNNEL_DANGER_LOG": str(danger_log)}
    async with http_gateway(home, env) as gw, httpx2.AsyncClient(timeout=10) as http, \
            Client(f"{gw.url}/mcp", mode="legacy", cache=None) as client:
        ok = await health(http, gw.url, lambda d: d["status"] != "starting")
        assert ok["status"] == "ok" and ok["config"] == {"errors": [], "warnings": [TYPO_WARNING]}
        await http_gate_holds(client)
        for how in BREAKS:
            break_file(home, rel, how, good[rel])
            doc = await health(http, gw.url, lambda d: d["status"] == "degraded")
            [error] = doc["config"]["errors"]
            assert error.startswith(f"{rel}: ") and "the last good version stays in force" in error, error
            expected = {"truncate": "is empty", "remove": "is missing", "half": "invalid JSON at line",
                        "bad-entry": "must be"}[how]
            assert expected in error and (how != "half" or " column " in error), error
            await http_gate_holds(client)
            write(home, rel, good[rel])
            await health(http, gw.url, lambda d: d["status"] == "ok")
        await http_gate_holds(client)
    assert not danger_log.exists()


def test_start_without_overlays_serves(home: Path) -> None:
    """Missing overlays are empty: the gateway starts (and exits 0 when stdin closes)."""
    write(home, "mcp/expose.json", {"version": 1, "upstreams": [], "expose": []})
    assert not (home / STATE).exists() and not (home / HOOK_STATE).exists()
    done = tfunnel(home, "serve")
    assert done.returncode == 0, done.stderr
    assert '"event": "ready"' in done.stderr
