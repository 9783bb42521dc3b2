"""Tokens: what a model is given at the start of a session, lean surface against full, for homes
with 1, 10 and 50 upstreams.

    python bench/tokens.py [--counter cl100k_base|o200k_base|estimate] [--upstreams 1,10,50]
    python bench/tokens.py --rss     # the gateway's RSS with each counter, after counting one list

Each home is a real one (seeded like `tfunnel init`, its `mcp/expose.json` naming the upstreams),
its upstream tools the real servers' tool lists in `tests/fixtures/real_descriptors.json`
(mcp-server-git, mcp-server-time, server-everything, the mock upstream, taken in turn), as a
gateway would have approved them (`mcp/tool-approvals.json`). Nothing is started: the catalog is
built the way `tfunnel tools --tokens` builds it (`tfunnel.manage.tokens_cmd`). Columns: the
top-level `tools/list` result lean (as served: the four meta-tools) and full (every enabled tool
top-level), the server instructions (the gateway's text plus a section per upstream, capped as
the gateway caps them), and lean and full with the instructions. Prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tfunnel.approvals.book import Book, Pin, Record  # noqa: E402
from tfunnel.approvals.store import write  # noqa: E402
from tfunnel.config.home import seed_dir, seed_home  # noqa: E402
from tfunnel.config.load import load_settings  # noqa: E402
from tfunnel.manage.tokens_cmd import offline_catalog, token_rows  # noqa: E402
from tfunnel.observe.tokens import Counter  # noqa: E402
from tfunnel.route.methods import INSTRUCTIONS  # noqa: E402
from tfunnel.surface.instructions import Section, compose  # noqa: E402

FIXTURE = ROOT / "tests" / "fixtures" / "real_descriptors.json"
SERVERS = ("mcp-server-git", "mcp-server-time", "server-everything", "mock_upstream")
# Any digest of the right form: nothing here compares them.
DIGEST = "sha256:" + "0" * 64


def build_home(path: Path, upstreams: int, descriptors: Mapping[str, Any]) -> list[Section]:
    """A home at `path` with `upstreams` upstreams, each one real server's tools, approved; its
    instruction sections."""
    seed_home(path, seed_dir())
    rows, records, sections = [], {}, []
    for index in range(upstreams):
        server = SERVERS[index % len(SERVERS)]
        uid = f"u{index + 1:02d}"
        description = f"{server}, instance {index + 1}"
        rows.append({"id": uid, "command": "python3", "args": ["-c", "pass"], "description": description})
        tools = descriptors[server]["tools"]
        records[uid] = Record(approved={f"tool:{t['name']}": Pin(DIGEST, t) for t in tools})
        sections.append(Section(uid, description, descriptors[server].get("instructions") or ""))
    (path / "mcp" / "expose.json").write_text(json.dumps({"version": 1, "upstreams": rows, "expose": []}))
    write(path, Book(records))
    return sections


def measure(upstreams: int, counter: Counter, descriptors: Mapping[str, Any]) -> dict[str, int]:
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        sections = build_home(home, upstreams, descriptors)
        rows, lean, full = token_rows(offline_catalog(home), counter)
        cap = load_settings(home).upstream_instructions_max_chars
    instructions = counter.count(compose(INSTRUCTIONS, sections, cap))
    return {"upstreams": upstreams, "tools": len(rows) - sum(1 for _, listed, _ in rows if listed),
            "lean": lean, "full": full, "instructions": instructions}


def table(results: Sequence[dict[str, int]], counter: str) -> str:
    lines = ["| upstreams | tools (register + upstream) | tools/list lean | tools/list full | instructions "
             "| lean + instructions | full + instructions | full / lean |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        lean, full = r["lean"] + r["instructions"], r["full"] + r["instructions"]
        lines.append(f"| {r['upstreams']} | {r['tools']} | {r['lean']} | {r['full']} | {r['instructions']} "
                     f"| {lean} | {full} | {full / lean:.1f}x |")
    lines.append(f"\nTokens by `{counter}`.")
    return "\n".join(lines)


INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                   "clientInfo": {"name": "bench", "version": "1"}}}
LIST = {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}
HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}


def _post(url: str, body: Mapping[str, Any], session: str | None = None) -> str | None:
    headers = {**HEADERS, **({"mcp-session-id": session} if session else {})}
    request = urllib.request.Request(f"{url}/mcp", json.dumps(body).encode(), headers)
    with urllib.request.urlopen(request, timeout=30) as reply:
        reply.read()
        return reply.headers.get("mcp-session-id")


def _rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))


def rss(counter: str, upstreams: int, descriptors: Mapping[str, Any]) -> tuple[int, int]:
    """The HTTP gateway's RSS (KiB) before its first tools/list and once that list is counted."""
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        build_home(home, upstreams, descriptors)
        settings = json.loads((home / "toolfunnel.json").read_text())
        (home / "toolfunnel.json").write_text(json.dumps({**settings, "tokens": counter}))
        # The upstreams are `python3 -c pass`: they exit at once, so the gateway serves the
        # register tools only; what is measured is the counter's memory, not the tools'.
        proc = subprocess.Popen([sys.executable, "-m", "tfunnel", "--home", str(home), "serve", "--http",
                                 "--port", "0"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(ROOT)})
        try:
            assert proc.stderr is not None
            url = ""
            while not url:
                line = proc.stderr.readline()
                if not line:
                    raise RuntimeError("the gateway exited before it listened")
                found = re.search(rb'"urls": \["(http://[^"]+)"', line)
                url = found.group(1).decode() if found else ""
            time.sleep(1.0)  # let start-up settle
            before = _rss_kib(proc.pid)
            _post(url, LIST, _post(url, INIT))
            while True:
                with urllib.request.urlopen(f"{url}/metrics", timeout=30) as reply:
                    if re.search(rb'tfunnel_tokens_tools_list\{profile="default",surface="full"\} [1-9]',
                                 reply.read()):
                        break
                time.sleep(0.1)
            return before, _rss_kib(proc.pid)
        finally:
            proc.terminate()
            proc.wait(30)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--counter", choices=("cl100k_base", "o200k_base", "estimate"), default="cl100k_base")
    parser.add_argument("--upstreams", default="1,10,50", help="comma-separated upstream counts")
    parser.add_argument("--rss", action="store_true", help="measure the gateway's RSS with each counter")
    args = parser.parse_args(argv)
    descriptors = json.loads(FIXTURE.read_text())
    if args.rss:
        print("| counter | RSS before the first tools/list | after it is counted |\n|---|---:|---:|")
        for name in ("estimate", "cl100k_base", "o200k_base"):
            before, after = rss(name, 1, descriptors)
            print(f"| `{name}` | {before / 1024:.0f} MiB | {after / 1024:.0f} MiB |")
        return 0
    counter = Counter(args.counter)
    results = [measure(int(n), counter, descriptors) for n in args.upstreams.split(",")]
    print(table(results, counter.name))
    return 0


if __name__ == "__main__":
    sys.exit(main())
