"""An upstream's `_meta` on a tool result reaches the client, in both eras, through the gateway
(in-process; the upstream a real child)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.upstreams import write_expose
from tfunnel.testing.gateway import stdio_gateway as gateway

pytestmark = pytest.mark.timeout(60)

V = "2026-07-28"
META = {"io.modelcontextprotocol/protocolVersion": V, "io.modelcontextprotocol/clientCapabilities": {}}
SERVER_INFO = "io.modelcontextprotocol/serverInfo"

# A legacy upstream with one tool whose result carries `_meta`: a key of its own and a
# protocol key of its hop (its serverInfo), which must not pass for ours.
UPSTREAM = r'''
import json, sys
for line in sys.stdin:
    msg = json.loads(line)
    if "id" not in msg or "method" not in msg:
        continue
    method, result = msg["method"], {}
    if method == "initialize":
        result = {"protocolVersion": msg["params"]["protocolVersion"], "capabilities": {"tools": {}},
                  "serverInfo": {"name": "traced-upstream", "version": "1"}}
    elif method == "tools/list":
        result = {"tools": [{"name": "traced", "inputSchema": {"type": "object"}}]}
    elif method == "tools/call":
        result = {"content": [{"type": "text", "text": "traced"}],
                  "_meta": {"example.com/trace": "t1", "io.modelcontextprotocol/serverInfo": {"name": "up"}}}
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": result}) + "\n")
    sys.stdout.flush()
'''

CALL = {"name": "toolfunnel_run_tool", "arguments": {"name": "tr_traced", "args": {}}}


async def test_the_upstreams_meta_reaches_the_client_in_both_eras(home: Path, tmp_path: Path) -> None:
    """A forwarded result keeps the upstream's own `_meta` keys (legacy and modern); its protocol
    keys are dropped, and a modern result carries our serverInfo beside them."""
    script = tmp_path / "traced.py"
    script.write_text(UPSTREAM)
    write_expose(home, [{"id": "tr", "command": sys.executable, "args": [str(script)],
                         "allowOutsidePaths": True}])
    with trio.fail_after(45):
        async with gateway(home) as wire:
            await wire.initialize()
            legacy: dict[str, Any] = (await wire.request(1, "tools/call", CALL))["result"]
            modern: dict[str, Any] = (await wire.request(2, "tools/call", {**CALL, "_meta": META}))["result"]
    assert legacy["content"] == [{"type": "text", "text": "traced"}], legacy
    assert legacy["_meta"] == {"example.com/trace": "t1"}
    assert modern["resultType"] == "complete" and modern["content"] == legacy["content"]
    assert modern["_meta"]["example.com/trace"] == "t1"
    assert modern["_meta"][SERVER_INFO]["name"] == "tfunnel"
