"""Capture the real tool lists of public MCP servers into `bench/search/tools.json` (dev time only).

    .venv/bin/python bench/search/capture.py

Installs each server into a temporary directory (npm packages with `npm install`, PyPI packages
into a fresh virtualenv), starts it over stdio with the official `mcp` SDK client, asks
`tools/list` and writes {upstream id -> [tool definitions as listed]}. Not run by CI: the fixture
it writes is committed, so the benchmark needs no network.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import venv
from pathlib import Path
from typing import Any

import trio
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

OUT = Path(__file__).resolve().parent / "tools.json"
# upstream id -> (npm package, binary, args); the path argument is filled in at run time.
NPM: dict[str, tuple[str, str, list[str]]] = {
    "everything": ("@modelcontextprotocol/server-everything", "mcp-server-everything", []),
    "filesystem": ("@modelcontextprotocol/server-filesystem", "mcp-server-filesystem", ["{dir}"]),
    "memory": ("@modelcontextprotocol/server-memory", "mcp-server-memory", []),
    "thinking": ("@modelcontextprotocol/server-sequential-thinking",
                 "mcp-server-sequential-thinking", []),
    "github": ("@modelcontextprotocol/server-github", "mcp-server-github", []),
}
# upstream id -> (PyPI package, console script, args)
PYPI: dict[str, tuple[str, str, list[str]]] = {
    "time": ("mcp-server-time", "mcp-server-time", ["--local-timezone", "UTC"]),
    "git": ("mcp-server-git", "mcp-server-git", ["--repository", "{dir}"]),
    "fetch": ("mcp-server-fetch", "mcp-server-fetch", []),
}
LIST_S = 60.0


async def list_tools(command: str, args: list[str]) -> list[dict[str, Any]]:
    params = StdioServerParameters(command=command, args=args)
    with tempfile.TemporaryFile("w+") as errlog, trio.fail_after(LIST_S):
        async with Client(stdio_client(params, errlog=errlog), mode="legacy",  # type: ignore[arg-type]
                          cache=None) as client:
            result = await client.list_tools()
    return [tool.model_dump(mode="json", by_alias=True, exclude_none=True) for tool in result.tools]


def install_npm(root: Path) -> None:
    packages = [package for package, _, _ in NPM.values()]
    subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--prefix", str(root), *packages],
                   check=True)


def install_pypi(root: Path) -> Path:
    venv.create(root / "venv", with_pip=True)
    pip = root / "venv" / "bin" / "pip"
    for package, _, _ in PYPI.values():
        subprocess.run([str(pip), "install", "-q", package], check=False)
    return root / "venv" / "bin"


def prepare(root: Path) -> list[tuple[str, str, list[str]]]:
    """Install every server; (upstream id, command, args) for each one that installed."""
    work = root / "work"
    work.mkdir()
    subprocess.run(["git", "init", "-q", str(work)], check=True)
    install_npm(root / "npm")
    bin_dir = install_pypi(root / "py")
    servers: list[tuple[str, str, list[str]]] = []
    for upstream, (_, binary, args) in NPM.items():
        servers.append((upstream, str(root / "npm" / "node_modules" / ".bin" / binary), args))
    for upstream, (_, script, args) in PYPI.items():
        servers.append((upstream, str(bin_dir / script), args))
    installed = []
    for upstream, command, args in servers:
        if Path(command).exists():
            installed.append((upstream, command, [a.format(dir=work) for a in args]))
        else:
            print(f"{upstream}: not installed, skipped", file=sys.stderr)
    return installed


async def capture(servers: list[tuple[str, str, list[str]]]) -> dict[str, list[dict[str, Any]]]:
    tools: dict[str, list[dict[str, Any]]] = {}
    for upstream, command, args in servers:
        try:
            tools[upstream] = await list_tools(command, args)
        except Exception as error:  # one server failing to start must not lose the others
            print(f"{upstream}: {error!r}, skipped", file=sys.stderr)
            continue
        print(f"{upstream}: {len(tools[upstream])} tools", file=sys.stderr)
    return tools


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="tfunnel-capture-") as root:
        tools = trio.run(capture, prepare(Path(root)))
    OUT.write_text(json.dumps(tools, indent=1, sort_keys=True) + "\n")
    print(f"wrote {OUT}: {sum(map(len, tools.values()))} tools from {len(tools)} servers")


if __name__ == "__main__":
    main()
