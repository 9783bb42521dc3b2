"""How a register tool receives its arguments: stdin always, the environment when they fit (the
gateway in-process, `tfunnel.testing.gateway`; the tools are real processes). A real gateway
process whose own environment is not UTF-8 is in tests/e2e/test_tool_args.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.conftest import add_tools
from tfunnel.testing.gateway import stdio_gateway
from tfunnel.tools.runner import ARGS_ENV, MAX_ARG_STRLEN, fits_in_env

pytestmark = pytest.mark.timeout(60)

ARG_MAX = 2 * 1024 * 1024
# The value that exactly fills one environment string: "TOOLFUNNEL_TOOL_ARGS=" + value + NUL.
FULL = MAX_ARG_STRLEN - len(ARGS_ENV) - 2


@pytest.mark.parametrize(("value", "env", "argv", "arg_max", "fits"), [
    pytest.param("{}", {}, ["tool"], ARG_MAX, True, id="small"),
    pytest.param("x" * FULL, {}, ["tool"], ARG_MAX, True, id="exactly-one-string"),
    pytest.param("x" * (FULL + 1), {}, ["tool"], ARG_MAX, False, id="one-byte-over-one-string"),
    pytest.param("é" * (FULL // 2 + 1), {}, ["tool"], ARG_MAX, False, id="counted-in-bytes"),
    pytest.param("x" * 1000, {"BIG": "y" * 600_000, "ALSO": "z" * 500_000}, ["tool"], ARG_MAX, False,
                 id="environment-already-full"),
    pytest.param("x" * 1000, {}, ["tool", "a" * (ARG_MAX // 2)], ARG_MAX, False, id="argv-already-full"),
    pytest.param("x" * 1000, {}, ["tool"], 4096, True, id="small-arg-max"),
    pytest.param("x" * 3000, {}, ["tool"], 4096, False, id="over-half-a-small-arg-max"),
    pytest.param("{}", {"BAD": os.fsdecode(b"\xff\xfe")}, ["tool"], ARG_MAX, True,
                 id="an-environment-that-is-not-utf-8"),
])
def test_fits_in_env(value: str, env: dict[str, str], argv: list[str], arg_max: int, fits: bool) -> None:
    """Arguments go into the environment only when the exec would still succeed, with room to spare."""
    assert fits_in_env(ARGS_ENV, value, env, argv, arg_max) is fits


REPORTER = '''\
import json, os, stat, sys
raw = sys.stdin.read()
path = os.environ.get("TOOLFUNNEL_TOOL_ARGS_FILE")
print(json.dumps({
    "stdin": len(raw),
    "env": len(os.environ.get("TOOLFUNNEL_TOOL_ARGS", "")),
    "file": open(path).read() == raw if path else None,
    "mode": oct(stat.S_IMODE(os.stat(path).st_mode)) if path else None,
    "path": path,
}))
'''


@pytest.mark.parametrize("size", [10, 300_000], ids=["small", "larger-than-the-environment-holds"])
async def test_arguments_reach_the_tool_whatever_their_size(home: Path, size: int) -> None:
    """Small arguments arrive in TOOLFUNNEL_TOOL_ARGS and on stdin; arguments too large for the
    environment still run the tool: on stdin and in a private file (0600) that is gone afterwards."""
    (home / "tools" / "scripts" / "reporter.py").write_text(REPORTER)
    add_tools(home, {"id": "reporter", "name": "Reporter",
                     "invoke": {"type": "script", "path": "reporter.py"},
                     "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}}})
    async with stdio_gateway(home) as wire:
        await wire.initialize()
        reply = await wire.request(1, "tools/call", {"name": "toolfunnel_run_tool",
                                                     "arguments": {"name": "reporter",
                                                                   "args": {"text": "x" * size}}})
    result = reply["result"]
    assert not result.get("isError"), result
    seen = result["structuredContent"]
    assert seen["stdin"] == size + len('{"text":""}')
    if size < 1000:
        assert (seen["env"], seen["file"]) == (seen["stdin"], None)
    else:
        assert (seen["env"], seen["file"], seen["mode"]) == (0, True, "0o600")
        assert not os.path.exists(seen["path"])
