"""The peers the benchmark drives, and the throwaway tfunnel homes they use.

Two upstreams sit at the end of the line, each measured in a set of its own: `fast` (the Node.js
NDJSON echo server `bench/fast_upstream.mjs`, tens of microseconds per answer, so the gateway is
the bottleneck) and `python` (`python -m tfunnel.testing.mock_upstream`, which saturates first).
Within a set the targets differ only in what sits in front of the upstream U (id `fast` or `mock`):

    direct            client -> U
    relay             client -> bench/relay.py -> U
    tfunnel/curated   client -> tfunnel serve -> U; tools/call "<id>_echo" (an expose entry)
    tfunnel/run_tool  client -> tfunnel serve -> U; tools/call "toolfunnel_run_tool"
                      {"name": "<id>_echo", "args": {...}}

and the HTTP face, fast upstream only, in a comparison of its own:

    http/relay        HTTP client -> POST /mcp -> bench/http_relay.py (bare hypercorn) -> U
    http/legacy       HTTP client (initialize, Mcp-Session-Id) -> tfunnel serve --http -> U
    http/modern       HTTP client (2026-07-28: stateless POSTs, `_meta`, Mcp-* headers)
                      -> tfunnel serve --http -> U
"""

from __future__ import annotations

import compileall
import json
import os
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

JSON = dict[str, Any]

PYTHON = sys.executable
BENCH = Path(__file__).resolve().parent
MOCK_ARGV = (PYTHON, "-m", "tfunnel.testing.mock_upstream")
FAST_UPSTREAM = BENCH / "fast_upstream.mjs"
FAST_ARGV = ("node", str(FAST_UPSTREAM))
RELAY = BENCH / "relay.py"
HTTP_RELAY = BENCH / "http_relay.py"
RUN_TOOL = "toolfunnel_run_tool"
DIRECT = "direct"
RELAY_NAME = "relay"
HTTP_RELAY_NAME = "http/relay"
HTTP_LEGACY = "http/legacy"
HTTP_MODERN = "http/modern"


@dataclass(frozen=True)
class Upstream:
    """An upstream the targets of one set put at the end of the line."""

    name: str  # "fast" or "python": the set's name in tables and JSON
    id: str  # its id in the gateway home's expose.json; curated tools are "<id>_<tool>"
    argv: tuple[str, ...]
    outside_home: bool = False  # its program lies outside the home (the isolation guard must allow it)


FAST = Upstream("fast", "fast", FAST_ARGV, outside_home=True)
PYTHON_MOCK = Upstream("python", "mock", MOCK_ARGV)
UPSTREAMS = {u.name: u for u in (FAST, PYTHON_MOCK)}


@dataclass(frozen=True)
class Target:
    name: str
    argv: tuple[str, ...]
    tool_prefix: str = ""  # the gateway surfaces upstream tool `echo` as f"{tool_prefix}echo"
    via_run_tool: bool = False  # call through the meta-tool instead of the top-level tool
    era: str = "legacy"  # HTTP targets: "legacy" (session), "modern" (stateless), "plain" (the relay)

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


def upstream_entry(upstream_id: str, argv: tuple[str, ...], outside_home: bool) -> JSON:
    """An expose.json upstream entry that starts `argv`."""
    entry: JSON = {"id": upstream_id, "command": argv[0], "args": list(argv[1:])}
    if outside_home:
        entry["allowOutsidePaths"] = True  # bench/fast_upstream.mjs is not under the home
    return entry


def seed_home(home: Path, tree: Path | None = None) -> None:
    """Seed `home` with `tfunnel check` (of the checkout `tree`, default this one: a home seeded
    by a newer tree may hold rows an older gateway refuses, such as an http hook)."""
    where = {"env": {**os.environ, "PYTHONPATH": str(tree)}} if tree is not None else {}
    subprocess.run([PYTHON, "-P", "-m", "tfunnel", "--home", str(home), "check"], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, **where)  # type: ignore[call-overload]


def prepare_home(home: Path, upstream: Upstream = PYTHON_MOCK, tree: Path | None = None) -> None:
    """Seed `home` with `tfunnel check` (of `tree`, see `seed_home`), attach `upstream`, turn every
    hook and the audit log off."""
    seed_home(home, tree)
    # Curate echo and slow under their default names, so "<id>_echo" is both a top-level tool and
    # the name toolfunnel_run_tool resolves (an "as" rename would hide the default name).
    expose = {
        "version": 1,
        "upstreams": [upstream_entry(upstream.id, upstream.argv, upstream.outside_home)],
        "expose": [{"upstream": upstream.id, "tool": tool, "as": f"{upstream.id}_{tool}"}
                   for tool in ("echo", "slow")],
    }
    write_expose(home, expose)


def write_expose(home: Path, expose: JSON) -> None:
    """Write `mcp/expose.json`; turn every hook and the audit log off."""
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


def make_targets(home: Path, upstream: Upstream = PYTHON_MOCK) -> list[Target]:
    """The stdio targets of one upstream's set, in the order each round runs them (`home` is
    prepared for `upstream`)."""
    gateway = (PYTHON, "-m", "tfunnel", "--home", str(home), "serve")
    prefix = f"{upstream.id}_"
    return [
        Target(DIRECT, upstream.argv),
        Target(RELAY_NAME, (PYTHON, str(RELAY), *upstream.argv)),
        Target("tfunnel/curated", gateway, tool_prefix=prefix),
        Target("tfunnel/run_tool", gateway, tool_prefix=prefix, via_run_tool=True),
    ]


def make_before_targets(home: Path, tree: Path, upstream: Upstream = PYTHON_MOCK) -> list[Target]:
    """tfunnel as built from another checkout `tree` (an earlier commit, say), on its own home,
    measured in the same rounds as this one: `before/curated` and `before/run_tool`. `-P`: with
    `-m`, Python would put the working directory first on the path, and a bench run from this
    checkout would then measure this checkout's tfunnel under the other's name."""
    gateway = ("env", f"PYTHONPATH={tree}", PYTHON, "-P", "-m", "tfunnel", "--home", str(home), "serve")
    prefix = f"{upstream.id}_"
    return [Target("before/curated", gateway, tool_prefix=prefix),
            Target("before/run_tool", gateway, tool_prefix=prefix, via_run_tool=True)]


def http_gateway_argv(home: Path) -> tuple[str, ...]:
    """The HTTP gateway on `home`; `--port 0` takes any free port (read from its log)."""
    return (PYTHON, "-m", "tfunnel", "--home", str(home), "--log-format", "json", "serve",
            "--http", "--port", "0", "--grace", "1")


def make_http_targets(home: Path, upstream: Upstream = FAST) -> list[Target]:
    """The HTTP face's targets on `home` (prepared for `upstream`): the bare hypercorn relay and
    the gateway over Streamable HTTP with a legacy and a modern client, each its own process."""
    prefix = f"{upstream.id}_"
    return [
        Target(HTTP_RELAY_NAME, (PYTHON, str(HTTP_RELAY), *upstream.argv), era="plain"),
        Target(HTTP_LEGACY, http_gateway_argv(home), tool_prefix=prefix, era="legacy"),
        Target(HTTP_MODERN, http_gateway_argv(home), tool_prefix=prefix, era="modern"),
    ]


def _write_json(path: Path, value: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value, indent=2) + "\n")
