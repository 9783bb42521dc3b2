"""What a stdio gateway imports at start-up: nothing it needs only for another face or transport.

Start-up time and memory are mostly imports (bench/README.md, "Cold start"), so the libraries of
the HTTP face, of HTTP and WebSocket upstreams, of JWT auth, schema validation and token counting
are imported when first used. A real `tfunnel serve` on a home with one stdio upstream, asked which
of them it loaded once it has answered a call.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.upstreams import mock_upstream, set_upstreams

LATE = ("httpx2", "httpcore2", "h11", "trio_websocket", "wsproto", "hypercorn", "h2", "jsonschema", "jwt",
        "cryptography", "prometheus_client", "bpe_openai", "asyncio")

# Run in the gateway before its main(): once the first tools/call has been answered, print the
# late modules that are loaded to stderr.
PROBE = """
import runpy, sys, atexit
LATE = {late!r}
def report():
    loaded = sorted(m for m in LATE if m in sys.modules and type(sys.modules[m]).__name__ != "_Deferred")
    sys.stderr.write("LOADED " + ",".join(loaded) + "\\n")
atexit.register(report)
sys.argv = ["tfunnel", *sys.argv[1:]]
runpy.run_module("tfunnel", run_name="__main__")
"""


@pytest.mark.timeout(60)
def test_a_stdio_gateway_imports_no_library_of_another_face(home: Path, tmp_path: Path) -> None:
    set_upstreams(home, mock_upstream("mock"))
    requests = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
         "params": {"name": "toolfunnel_list_tools", "arguments": {"query": "echo"}}},
    ]
    stdin = "".join(json.dumps(r) + "\n" for r in requests)
    probe = PROBE.format(late=LATE)
    done = subprocess.run([sys.executable, "-c", probe, "--home", str(home), "serve"], input=stdin,
                          capture_output=True, text=True, timeout=50, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    answers = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    assert sorted(a.get("id") for a in answers if "result" in a) == [1, 2], done.stderr[-2000:]
    loaded = [line for line in done.stderr.splitlines() if line.startswith("LOADED ")]
    assert loaded == ["LOADED "], loaded
