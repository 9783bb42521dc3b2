"""Run a register tool's invoke as a child process and map its outcome."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import structlog

from tfunnel.config.home import child_environment
from tfunnel.config.model import Limits, ToolEntry
from tfunnel.errors import ToolFailure
from tfunnel.process import ProcessSpec, run_child
from tfunnel.protocol.jsonrpc import to_json
from tfunnel.protocol.results import ToolResult
from tfunnel.tools.resolve import invoke_argv
from tfunnel.tools.result import map_outcome

log = structlog.get_logger("tfunnel.tools")


class LocalRunner:
    """Executes register tools for one home: env, cwd, limits."""

    def __init__(self, home: Path, limits: Limits, base_env: Mapping[str, str] | None = None) -> None:
        self.home = home
        self.limits = limits
        self.env = child_environment(home, base_env)

    async def run(self, entry: ToolEntry, args: Mapping[str, Any]) -> ToolResult:
        if entry.invoke is None:
            raise ToolFailure(f"tool {entry.id!r} has no invoke and cannot run")
        payload = to_json(dict(args))
        timeout = entry.timeout_s or self.limits.tool_timeout_s
        spec = ProcessSpec(
            argv=invoke_argv(self.home, entry.invoke),
            cwd=str(self.home),
            env={**self.env, "TOOLFUNNEL_TOOL_ARGS": payload},
            stdin=payload.encode(),
            timeout_s=timeout,
            output_cap=self.limits.tool_output_bytes,
        )
        outcome = await run_child(spec)
        log.info("tool ran", tool=entry.id, exit=outcome.returncode, timed_out=outcome.timed_out,
                 duration_ms=round(outcome.duration_s * 1000, 1))
        return map_outcome(entry.id, outcome, timeout, self.limits.tool_output_bytes)
