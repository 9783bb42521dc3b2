"""ToolFunnel 0.6 as it is, from `tests/field/toolfunnel-0.6/` (captured from ToolFunnel itself;
its NOTE.md says how and when): its own stdio test client's bytes replayed against tfunnel and read
the way that client reads them, and a home ToolFunnel made, served as ToolFunnel served it. The
expectations come from the recordings, not from a description of them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.toolfunnel_home import write_toolfunnel_home
from tfunnel.testing.cli import run
from tfunnel.testing.gateway import StdioGateway, stdio_gateway

pytestmark = pytest.mark.timeout(60)

FIELD = Path(__file__).resolve().parent / "field" / "toolfunnel-0.6"
EXCHANGES = ("stdio", "stdio-ndjson")  # test/stdio.test.js (Content-Length frames), demo/client.js (NDJSON)


def client_reads(stdout: bytes) -> dict[Any, dict[str, Any]]:
    """What ToolFunnel's test clients make of a gateway's stdout (their reader, quoted in the
    fixture's NOTE.md): cut at each newline, trim, parse, skip what does not parse, key by id.
    A last piece without its newline is not read."""
    replies: dict[Any, dict[str, Any]] = {}
    for line in stdout.decode("utf-8", "replace").split("\n")[:-1]:
        line = line.strip()
        if not line:
            continue
        try:
            message = json.loads(line)
        except ValueError:
            continue
        if isinstance(message, dict) and "id" in message:
            replies[message["id"]] = message
    return replies


def requests_sent(exchange: str) -> list[dict[str, Any]]:
    """The requests the client sent in the recording, in order."""
    sent = []
    for item in json.loads((FIELD / exchange / "exchange.json").read_text()):
        if item["dir"] == "c2s":
            body = item["raw"].split("\r\n\r\n", 1)[1] if item["framing"] == "content-length" else item["raw"]
            sent.append(json.loads(body))
    return [message for message in sent if "id" in message]


async def replayed(wire: StdioGateway, sent: bytes, ids: set[Any]) -> bytes:
    """Write the client's recorded bytes as it wrote them, and read stdout until its reader has
    a reply to each of `ids` (or 10 s passed): everything the gateway wrote."""
    await wire.stdin.send_all(sent)
    out = bytearray()
    with trio.move_on_after(10):
        while not ids <= set(client_reads(bytes(out))):
            out += await wire.stdout.receive_some(65536)
    return bytes(out)


@pytest.mark.parametrize("exchange", EXCHANGES)
async def test_toolfunnels_own_client_reads_a_reply_to_each_request(home: Path, exchange: str) -> None:
    """Each recorded client's bytes, replayed: its reader finds a reply to every request, as it
    did with ToolFunnel, and each reply is one line of JSON, as ToolFunnel wrote them (a gateway
    that answered a framed client in Content-Length framing fails here: that reader finds none)."""
    ids = {message["id"] for message in requests_sent(exchange)}
    theirs = (FIELD / exchange / "server-to-client.bin").read_bytes()
    assert set(client_reads(theirs)) == ids  # the recording: ToolFunnel answered each, in lines
    async with stdio_gateway(home) as wire:
        ours = await replayed(wire, (FIELD / exchange / "client-to-server.bin").read_bytes(), ids)
    assert set(client_reads(ours)) == ids, ours[:400]
    assert ours.count(b"\n") == len(ids) == theirs.count(b"\n")  # one line each, nothing else written
    assert b"Content-Length" not in ours


async def test_the_handshake_and_listing_answer_as_toolfunnels_did(home: Path) -> None:
    """The framed client's initialize and tools/list, replayed: the version it offered is echoed,
    tools are declared with listChanged, and the top level is the same four meta-tools, in
    ToolFunnel's order."""
    theirs = client_reads((FIELD / "stdio" / "server-to-client.bin").read_bytes())
    async with stdio_gateway(home) as wire:
        ours = client_reads(await replayed(wire, (FIELD / "stdio" / "client-to-server.bin").read_bytes(),
                                           {1, 2, 3}))
    assert ours[1]["result"]["protocolVersion"] == theirs[1]["result"]["protocolVersion"] == "2024-11-05"
    assert ours[1]["result"]["capabilities"]["tools"] == theirs[1]["result"]["capabilities"]["tools"]
    names = [[tool["name"] for tool in side[2]["result"]["tools"]] for side in (ours, theirs)]
    assert names[0] == names[1]
    assert ours[3]["result"]["content"][0]["type"] == theirs[3]["result"]["content"][0]["type"] == "text"


def toolfunnel_made_home(tmp_path: Path) -> Path:
    """The home ToolFunnel seeded and then changed through its own tools, as it wrote it (its own
    scripts are not in the fixture: a tf_* entry that needed them would fail here)."""
    home = tmp_path / "home"
    shutil.copytree(FIELD / "home", home)
    return home


def test_check_adopts_every_management_entry_toolfunnel_wrote(tmp_path: Path) -> None:
    """`tfunnel check` on the ToolFunnel home notes every `tf_*` entry of its register as served by
    tfunnel's built-in, in the spelling ToolFunnel writes (`scripts/tf-x.js`, relative to tools/)."""
    home = toolfunnel_made_home(tmp_path)
    register = json.loads((home / "tools" / "tools.register.json").read_text())
    entries = {tool["id"]: tool["invoke"]["path"] for tool in register["tools"]
               if tool["id"].startswith("tf_")}
    assert entries and all(path.startswith("scripts/tf-") for path in entries.values())
    done = run(home, "check")
    for tool_id, path in entries.items():
        assert (f"register entry {tool_id} runs ToolFunnel's {path}; serving tfunnel's built-in "
                f"{tool_id} instead") in done.stdout, done.stdout


async def test_the_toolfunnel_home_serves_its_tools_as_toolfunnel_did(tmp_path: Path) -> None:
    """Served as ToolFunnel wrote it: `greet` (made hot through tf_tool_set) is at the top level and
    answers what ToolFunnel answered; `tf_list` runs tfunnel's built-in, not ToolFunnel's missing
    script."""
    home = toolfunnel_made_home(tmp_path)
    info = json.loads((FIELD / "capture-info.json").read_text())
    [greeted] = [step["inner"] for step in info["home_steps"] if step["step"] == "run greet"]
    async with stdio_gateway(home) as wire:
        await wire.initialize("2024-11-05")
        top = [tool["name"] for tool in (await wire.request(1, "tools/list"))["result"]["tools"]]
        assert "greet" in top
        greet = await wire.request(2, "tools/call", {"name": "greet", "arguments": {"name": "field"}})
        assert not greet["result"].get("isError"), greet
        assert json.loads(greet["result"]["content"][0]["text"]) == greeted
        run_tf_list = {"name": "tf_list", "args": {"kind": "tools"}}
        listed = await wire.request(3, "tools/call", {"name": "toolfunnel_run_tool",
                                                      "arguments": run_tf_list})
        assert not listed["result"].get("isError"), listed
        assert "greet" in json.dumps(listed["result"]["structuredContent"])


def test_the_written_toolfunnel_home_spells_paths_as_toolfunnel_does(tmp_path: Path) -> None:
    """`tests/toolfunnel_home.py` (the ToolFunnel home other tests build) invokes each tool it shares
    with ToolFunnel's register by the path ToolFunnel's register gives it."""
    written = json.loads((write_toolfunnel_home(tmp_path / "written") / "tools" / "tools.register.json")
                         .read_text())["tools"]
    field = {tool["id"]: tool["invoke"] for tool in
             json.loads((FIELD / "home" / "tools" / "tools.register.json").read_text())["tools"]}
    shared = [tool for tool in written if tool["id"] in field]
    assert len(shared) >= 10
    for tool in shared:
        assert tool["invoke"] == field[tool["id"]], tool["id"]
