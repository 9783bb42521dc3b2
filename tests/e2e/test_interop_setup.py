"""The third-party software `scripts/test` installs for interop tests works as `tests/interop.py`
describes: the legacy-only and the dual-era mcp-server-time, and the conformance suite under Node 22."""

from __future__ import annotations

import re
import socket
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio
from mcp import Client, MCPError, StdioServerParameters
from mcp.types import TextContent

from tests.interop import (
    CONFORMANCE_VERSION,
    EXPECTED_FAILURES_DIR,
    NODE_BIN_DIR,
    SKIPPED,
    conformance_command,
    conformance_env,
    legacy_time_command,
    modern_time_command,
    modern_time_http_command,
    run_conformance_async,
)
from tests.wire import loopback_server

LEGACY_VERSIONS = {"2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"}
CONVERT = {"source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"}
# Scenarios the interop tests run; `conformance list` must know them all.
SCENARIOS = ["server-initialize", "server-stateless", "tools-list", "caching", "dns-rebinding-protection",
             "http-header-validation"]
BASELINE = EXPECTED_FAILURES_DIR / "expected-failures.yml"


def params(argv: list[str]) -> StdioServerParameters:
    return StdioServerParameters(command=argv[0], args=argv[1:])


def leaves(exc: BaseException) -> list[BaseException]:
    """The non-group exceptions inside `exc` (the SDK raises through nested trio nurseries)."""
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for sub in exc.exceptions for leaf in leaves(sub)]
    return [exc]


@pytest.mark.timeout(60)
async def test_legacy_time_server_speaks_the_initialize_handshake() -> None:
    with trio.fail_after(45):
        async with Client(params(legacy_time_command()), mode="legacy", cache=None) as client:
            assert client.protocol_version == "2025-11-25"
            assert client.server_info is not None
            # The mcp 1.x SDK reports its own version as the server's (mcp-server-time 2025.9.25).
            assert (client.server_info.name, client.server_info.version) == ("mcp-time", "1.30.0")
            tools = await client.list_tools()
            assert [t.name for t in tools.tools] == ["get_current_time", "convert_time"]
            result = await client.call_tool("convert_time", CONVERT)
            assert not result.is_error
            block = result.content[0]
            assert isinstance(block, TextContent) and '"time_difference": "+9.0h"' in block.text


@pytest.mark.timeout(60)
async def test_legacy_time_server_cannot_reach_the_modern_era() -> None:
    # Forced modern: the server rejects the pre-initialize server/discover with -32602.
    with trio.fail_after(20), pytest.raises(BaseException) as caught:
        async with Client(params(legacy_time_command()), mode="2026-07-28", cache=None) as client:
            await client.list_tools()
    codes = [leaf.code for leaf in leaves(caught.value) if isinstance(leaf, MCPError)]
    assert codes == [-32602], repr(caught.value)
    # Auto mode probes 2026-07-28, is refused, and falls back to a legacy session.
    with trio.fail_after(20):
        async with Client(params(legacy_time_command()), mode="auto", cache=None) as client:
            assert client.protocol_version in LEGACY_VERSIONS
            assert client.protocol_version == "2025-11-25"


@pytest.mark.timeout(60)
async def test_modern_time_server_is_dual_era() -> None:
    for mode, version in (("auto", "2026-07-28"), ("legacy", "2025-11-25")):
        with trio.fail_after(20):
            async with Client(params(modern_time_command()), mode=mode, cache=None) as client:
                assert client.protocol_version == version
                assert client.server_info is not None
                assert client.server_info.version == "2026.10.19"


@pytest.mark.timeout(60)
def test_conformance_cli_runs_under_node_22() -> None:
    argv = conformance_command()
    assert Path(argv[0]).parent == NODE_BIN_DIR  # not the machine's node 20
    node = subprocess.run([argv[0], "--version"], capture_output=True, text=True, timeout=30, check=True)
    assert re.fullmatch(r"v22\.\d+\.\d+", node.stdout.strip()), node.stdout
    version = subprocess.run([*argv, "--version"], capture_output=True, text=True, timeout=30,
                             env=conformance_env(), check=True)
    assert version.stdout.strip() == CONFORMANCE_VERSION
    listing = subprocess.run([*argv, "list", "--server"], capture_output=True, text=True, timeout=30,
                             env=conformance_env(), check=True)
    listed = set(re.findall(r"^\s*- (\S+) \[", listing.stdout, re.MULTILINE))
    assert set(SCENARIOS) <= listed, listing.stdout


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@asynccontextmanager
async def reference_http_server() -> AsyncIterator[str]:
    """The dual-era mcp-server-time over Streamable HTTP; yields its /mcp URL once it accepts."""
    port = free_port()
    async with loopback_server(modern_time_http_command(port), port):
        yield f"http://127.0.0.1:{port}/mcp"


def baseline_ids(scenario: str) -> set[str]:
    """The check ids the baseline file lists for `scenario`."""
    return set(re.findall(rf"^\s*- {re.escape(scenario)}:(\S+)", BASELINE.read_text(), re.MULTILINE))


@pytest.mark.timeout(120)
async def test_run_conformance_against_a_reference_server(tmp_path: Path) -> None:
    """run_conformance parses real results: a spec-following SDK server passes what it can."""
    async with reference_http_server() as url:
        legacy = await run_conformance_async(url, "server-initialize", out_dir=tmp_path, timeout_s=90)
        assert legacy.clean, legacy.summary()
        assert {"server-initialize", "server-session-id-visible-ascii", "wire-schema-valid"} <= {
            c.id for c in legacy.passed}
        assert legacy.result_dir is not None and legacy.result_dir.parent == tmp_path

        # Not applicable at 2026-07-28: the CLI runs nothing and exits 0, which is not a pass.
        gone = await run_conformance_async(url, "server-initialize", out_dir=tmp_path,
                                           spec_version="2026-07-28", timeout_s=90)
        assert gone.not_applicable and not gone.checks and not gone.clean

        modern = await run_conformance_async(url, "tools-list", out_dir=tmp_path,
                                             spec_version="2026-07-28", timeout_s=90)
        assert modern.clean, modern.summary()
        assert {"tools-list", "tools-name-format", "tools-list-deterministic-order"} <= {
            c.id for c in modern.passed}

        # server-stateless fails exactly the fixture-only checks of the baseline that apply to it
        # (this server declares no listChanged, so those are SKIPPED), each as "Not testable"; with
        # the baseline the CLI accepts that (it would exit 1 for anything else, or a stale entry).
        stateless = await run_conformance_async(url, "server-stateless", out_dir=tmp_path, timeout_s=90)
        worst = stateless.worst_by_id()
        expected = {cid for cid in baseline_ids("server-stateless") if worst.get(cid) != SKIPPED}
        assert len(expected) == 4 and stateless.failing_ids() == expected, stateless.summary()
        assert all(c.untestable for c in stateless.failures), stateless.summary()
        assert stateless.exit_status == 1
        baselined = await run_conformance_async(url, "server-stateless", out_dir=tmp_path,
                                                expected_failures=BASELINE, timeout_s=90)
        assert baselined.exit_status == 0, baselined.stdout
        assert not baselined.not_applicable and len(baselined.passed) >= 10, baselined.summary()
