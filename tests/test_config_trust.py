"""A config reload never loosens the gate, and unknown fields are reported: a stdio gateway
in-process (`tfunnel.testing.gateway`), `tfunnel check`, start refusal and the CLI writers
(in-process, `tfunnel.testing.cli`). The same breaks over a real HTTP gateway process and a real
`tfunnel serve` that starts without overlays are in tests/e2e/test_config_trust.py."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.hooks import EXIT2_DENY
from tests.test_stdio_wire import run_tool
from tfunnel.testing.cli import run
from tfunnel.testing.gateway import StdioGateway, stdio_gateway

pytestmark = pytest.mark.timeout(120)

STATE = "tools/tools.state.json"
HOOK_STATE = "hooks/hooks.state.json"
MANIFEST = "hooks/hooks.manifest.json"
SETTINGS = "toolfunnel.json"
LABELS = {STATE: "tool state", HOOK_STATE: "hook state", MANIFEST: "hook manifest"}
BREAKS = ("truncate", "remove", "half", "bad-entry")
DENY_ROW = {"id": "deny-danger", "event": "PreToolUse", "matcher": "danger|Danger Demo", "type": "command",
            "command": EXIT2_DENY, "timeout": 10, "enabled": False}  # on only through the overlay
TYPO_WARNING = (f"{SETTINGS}: gate: field 'askFalback': is not a known field and has no effect; "
                "did you mean 'askFallback'?")


def write(home: Path, rel: str, value: Any) -> str:
    text_ = value if isinstance(value, str) else json.dumps(value, indent=2)
    (home / rel).write_text(text_)
    return text_


def guarded_home(home: Path) -> dict[str, str]:
    """Gate `home`: a deny hook on `danger` enabled only by hooks.state.json, `hash` disabled by
    tools.state.json, no upstreams, and a typo in toolfunnel.json; return the good file texts."""
    write(home, "mcp/expose.json", {"version": 1, "upstreams": [], "expose": []})
    manifest = json.loads((home / MANIFEST).read_text())
    manifest["hooks"].append(DENY_ROW)
    settings = json.loads((home / SETTINGS).read_text())
    settings["gate"]["askFalback"] = "allow"
    write(home, SETTINGS, settings)
    return {MANIFEST: write(home, MANIFEST, manifest),
            HOOK_STATE: write(home, HOOK_STATE, {"deny-danger": True}),
            STATE: write(home, STATE, {"hash": {"enabled": False}})}


def bad_entry(rel: str, good: str) -> str:
    """The good document with one entry malformed, so that applying the rest would loosen the gate."""
    if rel == STATE:
        return json.dumps({"hash": {"enabled": "no"}})
    if rel == HOOK_STATE:
        return json.dumps({"deny-danger": "yes"})
    manifest = json.loads(good)
    manifest["hooks"][-1]["timeout"] = "soon"
    return json.dumps(manifest)


def break_file(home: Path, rel: str, how: str, good: str) -> None:
    path = home / rel
    if how == "truncate":
        path.write_bytes(b"")
    elif how == "remove":
        path.unlink()
    elif how == "half":
        path.write_text(good[: len(good) // 2])
    else:
        path.write_text(bad_entry(rel, good))


async def wait_count(stderr: bytearray, needle: str, count: int, timeout: float = 10.0) -> None:
    """Wait until `needle` occurs at least `count` times in a gateway's stderr."""
    with trio.fail_after(timeout):
        while stderr.decode(errors="replace").count(needle) < count:
            await trio.sleep(0.02)


class StdioCalls:
    def __init__(self, wire: StdioGateway) -> None:
        self.wire, self.next_id = wire, 0

    async def run(self, name: str) -> dict[str, Any]:
        self.next_id += 1
        params = run_tool(self.next_id, name, {"x": 1})["params"]
        result: dict[str, Any] = (await self.wire.request(self.next_id, "tools/call", params))["result"]  # type: ignore[arg-type]
        return result

    async def gate_holds(self) -> None:
        denied, disabled = await self.run("danger"), await self.run("hash")
        assert denied.get("isError") and denied["content"][0]["text"] == "exit-2 says no", denied
        assert disabled.get("isError") and "is disabled" in disabled["content"][0]["text"], disabled


@pytest.mark.parametrize("rel", [STATE, HOOK_STATE, MANIFEST])
async def test_a_broken_live_file_never_loosens_the_gate_over_stdio(home: Path, tmp_path: Path,
                                                                     rel: str) -> None:
    """Truncated, removed, half-written or with one bad entry: the deny still denies (the tool never
    runs), the disabled tool still refuses, the refusal is logged naming the file; restored, the
    error clears."""
    good = guarded_home(home)
    danger_log = tmp_path / "danger.log"
    label = LABELS[rel]
    async with stdio_gateway(home, {"TOOLFUNNEL_DANGER_LOG": str(danger_log)}) as wire:
        calls = StdioCalls(wire)
        await wire.initialize()
        await calls.gate_holds()
        for n, how in enumerate(BREAKS, start=1):
            break_file(home, rel, how, good[rel])
            await wait_count(wire.stderr, f"{label} reload refused", n)
            await calls.gate_holds()
            write(home, rel, good[rel])
            await wait_count(wire.stderr, f"{label} valid again", n)
            await calls.gate_holds()
        log = wire.stderr.decode()
        assert log.count(f'"file": "{rel}"') >= 2 * len(BREAKS)
        assert "invalid JSON at line" in log and "is missing (deleted while running)" in log
        assert log.count("askFalback") == 1  # warned once, at start
    assert not danger_log.exists()


async def test_sighup_relogs_no_warning_and_breaks_nothing(home: Path) -> None:
    """SIGHUP re-reads every file by the same rule: files that never existed stay fine (no error),
    and a warning already logged is not logged again (also when its file changes otherwise)."""
    write(home, "mcp/expose.json", {"version": 1, "upstreams": [], "expose": []})
    write(home, STATE, {"hash": {"hto": True}})
    async with stdio_gateway(home) as wire:
        await wire.initialize()
        await wire.request(1, "tools/list")
        for n in (1, 2):
            wire.signal(signal.SIGHUP)
            await wait_count(wire.stderr, "SIGHUP: reloading the config", n)
            await wire.request(1 + n, "ping")  # answered after the (synchronous) reloads ran
        write(home, STATE, {"hash": {"hto": True}, "echo": {"hiden": True}})
        await wait_count(wire.stderr, "field 'hiden'", 1)  # stderr is in order: all before is here
        log = wire.stderr.decode()
        assert log.count("field 'hto': is not a known field and has no effect; did you mean 'hot'?") == 1
        assert "reload refused" not in log and "broken at start" not in log


# --------------------------------------------------------------------------- start, check, writers


def tfunnel(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run(home, *args)


@pytest.mark.parametrize(("rel", "content"), [
    (STATE, '{"hash": {"enabled": "no"}}'), (STATE, '{"hash": {"enab'), (HOOK_STATE, '{"deny-danger": 1}'),
    (HOOK_STATE, ""),
], ids=["state-bad-entry", "state-half", "hook-state-bad-entry", "hook-state-empty"])
def test_start_refuses_a_malformed_overlay(home: Path, rel: str, content: str) -> None:
    """A malformed overlay at start is a refusal (exit 1) naming the file, not a silent {}."""
    write(home, rel, content)
    done = tfunnel(home, "serve")
    assert done.returncode == 1 and done.stdout == ""
    assert f"tfunnel: {rel}: " in done.stderr and "refusing to start" in done.stderr


def test_check_warns_about_an_unknown_field_and_fails(home: Path) -> None:
    """`tfunnel check` prints an unknown field as a warning with the nearest known field, exit 1."""
    manifest = json.loads((home / MANIFEST).read_text())
    manifest["hooks"][1]["failClosd"] = True
    write(home, MANIFEST, manifest)
    done = tfunnel(home, "check")
    assert done.returncode == 1
    assert (f"warning: {MANIFEST}: hooks[1] (id 'pre-tool-use/guard-danger-demo'): field 'failClosd': "
            "is not a known field and has no effect; did you mean 'failClosed'?") in done.stdout
    assert "0 problem(s) and 1 warning(s)" in done.stdout


def test_writers_keep_unknown_fields(home: Path) -> None:
    """`tfunnel mcp enable` and `tfunnel tool hot` rewrite their files keeping unknown fields
    verbatim (which `check` still reports)."""
    write(home, "mcp/expose.json", {"version": 1, "notes": {"owner": "ops"}, "upstreams": [
        {"id": "u", "command": "mcp-u", "enabled": False, "retries": 3}], "expose": []})
    write(home, STATE, {"hash": {"enabled": True, "pinned": "yes"}})
    assert tfunnel(home, "mcp", "enable", "u").returncode == 0
    assert tfunnel(home, "tool", "hot", "hash").returncode == 0
    expose = json.loads((home / "mcp/expose.json").read_text())
    assert expose["notes"] == {"owner": "ops"}
    assert expose["upstreams"] == [{"id": "u", "command": "mcp-u", "enabled": True, "retries": 3}]
    assert json.loads((home / STATE).read_text()) == {"hash": {"enabled": True, "pinned": "yes", "hot": True}}
    warned = [line for line in tfunnel(home, "check").stdout.splitlines() if line.startswith("warning: ")]
    assert [w.split("field ")[1].split(":")[0] for w in warned] == ["'pinned'", "'notes'", "'retries'"]
