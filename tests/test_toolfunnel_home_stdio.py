"""A ToolFunnel home served unchanged over stdio by the gateway (in-process): its `tf_*` entries answer
through tfunnel's built-ins, in-band; a home begun with only `toolfunnel.json` is completed and
serves under its own name (issue 21)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.toolfunnel_home import write_toolfunnel_home
from tfunnel.testing.gateway import StdioGateway as Wire
from tfunnel.testing.gateway import stdio_gateway as gateway

pytestmark = pytest.mark.timeout(90)


async def run_tool(wire: Wire, request_id: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    reply = await wire.request(request_id, "tools/call", {"name": "toolfunnel_run_tool",
                                                          "arguments": {"name": name, "args": args}})
    result = reply["result"]
    assert isinstance(result, dict)
    return result


def body(result: dict[str, Any]) -> Any:
    return json.loads(result["content"][0]["text"])


@pytest.mark.parametrize("stubs", [True, False], ids=["tf-scripts-are-stubs", "tf-scripts-missing"])
async def test_tf_list_works_in_band(tmp_path: Path, stubs: bool) -> None:
    """`tf_list {kind: "tools"}` (and `tf_wrap {}`) through `toolfunnel_run_tool` answer from our
    built-ins (the tf-*.js stubs, which would fail, never run); the demo tool runs as the node
    script it is; the start says once per adopted entry what it serves; the register is not
    rewritten."""
    home = write_toolfunnel_home(tmp_path / "home", stubs=stubs)
    register_before = (home / "tools" / "tools.register.json").read_bytes()
    async with gateway(home) as wire:
        init = await wire.initialize()
        assert init["result"]["serverInfo"]["name"] == "my-tools"
        listed = await run_tool(wire, "1", "tf_list", {"kind": "tools"})
        assert listed.get("isError") is not True, listed
        answer = body(listed)
        assert answer["ok"] is True and answer["kind"] == "tools"
        ids = {tool["id"] for tool in answer["tools"]}
        assert {"echo", "tf_list", "tf_pack", "tf_wrap"} <= ids
        echoed = await run_tool(wire, "2", "echo", {"greeting": "hi"})
        assert echoed.get("isError") is not True, echoed
        assert body(echoed) == {"ok": True, "args": {"greeting": "hi"}, "argv": []}
        # The built-in's own schema is what a client reads (the entry's older one offered "npm").
        reply = await wire.request("3", "tools/call", {"name": "toolfunnel_tool_instructions",
                                                       "arguments": {"name": "tf_pack"}})
        text = reply["result"]["content"][0]["text"]
        assert '"approvals"' in text and '"npm"' not in text
        # tf_wrap too answers from our built-in (its status: nothing wrapped).
        wrapped = await run_tool(wire, "4", "tf_wrap", {})
        assert wrapped.get("isError") is not True, wrapped
        assert body(wrapped)["ok"] is True and body(wrapped)["wrapping"] is None
    stderr = wire.stderr.decode()
    note = ("register entry tf_list runs ToolFunnel's scripts/tf-list.js; "
            "serving tfunnel's built-in tf_list instead")
    assert stderr.count(note) == 1, stderr
    assert "serving tfunnel's built-in tf_wrap instead" in stderr and "no built-in" not in stderr
    assert (home / "tools" / "tools.register.json").read_bytes() == register_before


async def test_an_adopted_entry_is_gated_like_ours(tmp_path: Path) -> None:
    """A PreToolUse hook that denies tf_list denies the adopted entry: nothing ran."""
    home = write_toolfunnel_home(tmp_path / "home")
    deny = home / "hooks" / "scripts" / "deny.py"
    deny.write_text("import sys\nsys.stderr.write('no listing here')\nsys.exit(2)\n")
    manifest = home / "hooks" / "hooks.manifest.json"
    doc = json.loads(manifest.read_text())
    doc["hooks"].append({"id": "pre-tool-use/deny-list", "event": "PreToolUse", "matcher": "tf_list",
                         "type": "command", "command": "python3 ${HOOKS_DIR}/scripts/deny.py",
                         "timeout": 10, "enabled": True})
    manifest.write_text(json.dumps(doc))
    async with gateway(home) as wire:
        await wire.initialize()
        denied = await run_tool(wire, "1", "tf_list", {"kind": "tools"})
        assert denied.get("isError") is True and "no listing here" in denied["content"][0]["text"]


async def test_a_home_with_only_toolfunnel_json_serves_under_its_name(tmp_path: Path) -> None:
    """Seeded file by file (one stderr line each), it starts and answers as its `serverName`."""
    home = tmp_path / "packed"
    home.mkdir()
    (home / "toolfunnel.json").write_text('{"serverName": "packed-tools"}')
    async with gateway(home) as wire:
        init = await wire.initialize()
        assert init["result"]["serverInfo"]["name"] == "packed-tools"
        listed = await run_tool(wire, "1", "tf_list", {"kind": "tools"})
        assert {"echo", "tf_list"} <= {tool["id"] for tool in body(listed)["tools"]}
    stderr = wire.stderr.decode()
    for rel in ("tools/tools.register.json", "tools/scripts/echo.py", "mcp/expose.json",
                "hooks/hooks.manifest.json"):
        assert f"tfunnel: seeded {rel} from the bundled defaults" in stderr
    assert (home / "toolfunnel.json").read_text() == '{"serverName": "packed-tools"}'
    assert not (home / "tools" / "tools.state.json").exists() and not (home / "auth").exists()
