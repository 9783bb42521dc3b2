"""The peers the benchmark drives, and the throwaway tfunnel home they use.

Every target puts the same mock upstream (`python -m tfunnel.testing.mock_upstream`) at the end
of the line; they differ in what sits in front of it:

    direct            client -> mock
    relay             client -> bench/relay.py -> mock
    tfunnel/curated   client -> tfunnel serve -> mock; tools/call "mock_echo" (an expose entry)
    tfunnel/run_tool  client -> tfunnel serve -> mock; tools/call "toolfunnel_run_tool"
                      {"name": "mock_echo", "args": {...}}

and, measured apart from those four in the HTTP-face comparison against `direct`:

    tfunnel/http      HTTP client -> POST /mcp -> tfunnel serve --http --port 0 -> mock;
                      tools/call "mock_echo" (the same expose entry, the same home)
"""

from __future__ import annotations

import compileall
import json
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

JSON = dict[str, Any]

PYTHON = sys.executable
MOCK_ARGV = (PYTHON, "-m", "tfunnel.testing.mock_upstream")
RELAY = Path(__file__).resolve().parent / "relay.py"
UPSTREAM_ID = "mock"
RUN_TOOL = "toolfunnel_run_tool"
DIRECT = "direct"
HTTP = "tfunnel/http"


@dataclass(frozen=True)
class Target:
    name: str
    argv: tuple[str, ...]
    tool_prefix: str = ""  # the gateway surfaces upstream tool `echo` as f"{tool_prefix}echo"
    via_run_tool: bool = False  # call through the meta-tool instead of the top-level tool

    @property
    def ready_tool(self) -> str:
        """The top-level tool whose appearance in tools/list means the upstream is usable."""
        return f"{self.tool_prefix}echo"

    def call_params(self, tool: str, args: Mapping[str, Any]) -> JSON:
        """`tools/call` params that reach upstream tool `tool` with `args` on this target."""
        name = f"{self.tool_prefix}{tool}"
        if self.via_run_tool:
            return {"name": RUN_TOOL, "arguments": {"name": name, "args": dict(args)}}
        return {"name": name, "arguments": dict(args)}


def prepare_home(home: Path) -> None:
    """Seed `home` with `tfunnel check`, attach the mock, turn every hook and the audit log off."""
    subprocess.run([PYTHON, "-m", "tfunnel", "--home", str(home), "check"], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    # Curate echo and slow under their default names, so "mock_echo" is both a top-level tool and
    # the name toolfunnel_run_tool resolves (an "as" rename would hide the default name).
    expose = {
        "version": 1,
        "upstreams": [{"id": UPSTREAM_ID, "command": MOCK_ARGV[0], "args": list(MOCK_ARGV[1:])}],
        "expose": [{"upstream": UPSTREAM_ID, "tool": tool, "as": f"{UPSTREAM_ID}_{tool}"}
                   for tool in ("echo", "slow")],
    }
    _write_json(home / "mcp" / "expose.json", expose)
    _write_json(home / "logs" / "log.config.json", {"enabled": False})
    manifest_path = home / "hooks" / "hooks.manifest.json"
    if manifest_path.exists():
        manifest = json.loads(manifest_path.read_text())
        for hook in manifest.get("hooks", []):
            hook["enabled"] = False
        _write_json(manifest_path, manifest)


def compile_bytecode(package: Path | None = None) -> None:
    """Bring the tfunnel package's bytecode up to date, as installing it does. Without this, a
    module changed since its .pyc was written is compiled from source at every gateway start
    (and at every mock start) whenever PYTHONDONTWRITEBYTECODE is set, which cold start would
    then measure. The relay imports only trio, whose bytecode pip wrote at install time."""
    package = package or Path(__file__).resolve().parent.parent / "tfunnel"
    compileall.compile_dir(str(package), quiet=1)


def make_targets(home: Path) -> list[Target]:
    """The targets in the order each round runs them."""
    gateway = (PYTHON, "-m", "tfunnel", "--home", str(home), "serve")
    prefix = f"{UPSTREAM_ID}_"
    return [
        Target(DIRECT, MOCK_ARGV),
        Target("relay", (PYTHON, str(RELAY), *MOCK_ARGV)),
        Target("tfunnel/curated", gateway, tool_prefix=prefix),
        Target("tfunnel/run_tool", gateway, tool_prefix=prefix, via_run_tool=True),
    ]


def make_before_targets(home: Path, tree: Path) -> list[Target]:
    """tfunnel as built from another checkout `tree` (an earlier commit, say), on its own home,
    measured in the same rounds as this one: `before/curated` and `before/run_tool`."""
    gateway = ("env", f"PYTHONPATH={tree}", PYTHON, "-m", "tfunnel", "--home", str(home), "serve")
    prefix = f"{UPSTREAM_ID}_"
    return [Target("before/curated", gateway, tool_prefix=prefix),
            Target("before/run_tool", gateway, tool_prefix=prefix, via_run_tool=True)]


def make_http_target(home: Path) -> Target:
    """The HTTP gateway on the same home; `--port 0` takes any free port (read from its log)."""
    return Target(HTTP, (PYTHON, "-m", "tfunnel", "--home", str(home), "--log-format", "json", "serve",
                         "--http", "--port", "0", "--grace", "1"), tool_prefix=f"{UPSTREAM_ID}_")


def _write_json(path: Path, value: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value, indent=2) + "\n")
