"""Run a register tool's invoke as a child process and map its outcome."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import structlog
import trio

from tfunnel.config.home import child_environment
from tfunnel.config.model import Limits, ToolEntry
from tfunnel.errors import ToolFailure
from tfunnel.proc.children import ProcessSpec, run_child
from tfunnel.protocol.jsonrpc import to_json
from tfunnel.protocol.results import ToolResult
from tfunnel.tools.resolve import invoke_argv
from tfunnel.tools.result import map_outcome

log = structlog.get_logger("tfunnel.tools")

ARGS_ENV = "TOOLFUNNEL_TOOL_ARGS"
ARGS_FILE_ENV = "TOOLFUNNEL_TOOL_ARGS_FILE"
# Linux refuses to exec a program when one environment string is longer than MAX_ARG_STRLEN
# (32 pages: 128 KiB) or argv and environment together pass ARG_MAX. Arguments that would not
# fit go to a private file instead (they are always on stdin too).
MAX_ARG_STRLEN = 32 * 4096
# Pointers and alignment the kernel counts besides the strings themselves, per string.
_PER_STRING = 8


def fits_in_env(name: str, value: str, env: Mapping[str, str], argv: Sequence[str], arg_max: int) -> bool:
    """Whether `name=value` can be added to `env` for an exec of `argv` (pure; sizes in bytes)."""
    # The bytes exec will pass: os.fsencode turns back the undecodable bytes of the gateway's own
    # environment (held as surrogates) instead of failing on them.
    entry = len(os.fsencode(name)) + 1 + len(value.encode("utf-8", "surrogatepass")) + 1
    if entry > MAX_ARG_STRLEN:
        return False
    used = sum(len(os.fsencode(k)) + len(os.fsencode(v)) + 2 + _PER_STRING for k, v in env.items())
    used += sum(len(os.fsencode(a)) + 1 + _PER_STRING for a in argv)
    # Half of ARG_MAX: the real bound also depends on the stack limit, which may be lower.
    return used + entry + _PER_STRING <= arg_max // 2


def _arg_max() -> int:
    try:
        return os.sysconf("SC_ARG_MAX")
    except (ValueError, OSError):
        return 128 * 1024  # the POSIX minimum is far below this; Linux has at least this much


@contextlib.contextmanager
def args_environment(payload: str, env: Mapping[str, str], argv: Sequence[str]) -> Iterator[dict[str, str]]:
    """The tool's environment with its arguments: in `TOOLFUNNEL_TOOL_ARGS` when they fit, else in
    a private temp file (mode 0600) named by `TOOLFUNNEL_TOOL_ARGS_FILE`, removed afterwards."""
    if fits_in_env(ARGS_ENV, payload, env, argv, _arg_max()):
        yield {**env, ARGS_ENV: payload}
        return
    fd, path = tempfile.mkstemp(prefix="tfunnel-args-", suffix=".json")  # created 0600
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(payload)
        yield {**env, ARGS_FILE_ENV: path}
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)


class LocalRunner:
    """Executes register tools for one home: env, cwd, limits."""

    def __init__(self, home: Path, limits: Limits, base_env: Mapping[str, str] | None = None,
                 slots: trio.CapacityLimiter | None = None) -> None:
        self.home = home
        self.limits = limits
        self.slots = slots
        self.env = child_environment(home, base_env)

    async def run(self, entry: ToolEntry, args: Mapping[str, Any]) -> ToolResult:
        if entry.invoke is None:
            raise ToolFailure(f"tool {entry.id!r} has no invoke and cannot run")
        payload = to_json(dict(args))
        timeout = entry.timeout_s or self.limits.tool_timeout_s
        argv = invoke_argv(self.home, entry.invoke)
        with args_environment(payload, self.env, argv) as env:
            spec = ProcessSpec(argv=argv, cwd=str(self.home), env=env, stdin=payload.encode(),
                               timeout_s=timeout, output_cap=self.limits.tool_output_bytes)
            outcome = await run_child(spec, self.slots)
        log.info("tool ran", tool=entry.id, exit=outcome.returncode, timed_out=outcome.timed_out,
                 duration_ms=round(outcome.duration_s * 1000, 1))
        return map_outcome(entry.id, outcome, timeout, self.limits.tool_output_bytes)
