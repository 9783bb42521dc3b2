"""Bounded processes: a gateway-wide cap on tool and hook processes, hooks bounded per call (the
gateway in-process, `tfunnel.testing.gateway`; tools and hooks are real processes). The bound on
a stdio client's requests in flight, over a real gateway process's pipes, is in
tests/e2e/test_process_limits.py."""

from __future__ import annotations

import json
import resource
from pathlib import Path

import pytest
import trio

from tests.conftest import add_tools
from tests.hooks import set_hooks
from tfunnel.proc import children
from tfunnel.testing.gateway import stdio_gateway

pytestmark = pytest.mark.timeout(90)

# Marks itself running in a folder, notes how many were running, sleeps, unmarks itself.
COUNTER = '''\
import os, sys, time
folder = sys.argv[1]
mark = os.path.join(folder, f"running.{os.getpid()}")
open(mark, "w").close()
seen = len([n for n in os.listdir(folder) if n.startswith("running.")])
with open(os.path.join(folder, "seen"), "a") as fh:
    fh.write(f"{seen}\\n")
time.sleep(0.6)
os.remove(mark)
print("done")
'''


def run_tool(request_id: int, name: str, args: dict[str, object] | None = None) -> dict[str, object]:
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call",
            "params": {"name": "toolfunnel_run_tool", "arguments": {"name": name, "args": args or {}}}}


async def test_tool_processes_are_capped_gateway_wide(home: Path, tmp_path: Path) -> None:
    """With limits.maxToolProcesses 2, six calls at once all finish, never more than two tool
    processes running at a time; the others wait their turn."""
    settings = json.loads((home / "toolfunnel.json").read_text())
    settings["limits"]["maxToolProcesses"] = 2
    (home / "toolfunnel.json").write_text(json.dumps(settings))
    folder = tmp_path / "runs"
    folder.mkdir()
    (home / "tools" / "scripts" / "counter.py").write_text(COUNTER)
    add_tools(home, {"id": "counter", "name": "Counter",
                     "invoke": {"type": "shell", "command": f"python3 tools/scripts/counter.py {folder}"}})
    async with stdio_gateway(home) as wire:
        await wire.initialize()
        for request_id in range(6):
            await wire.send(run_tool(request_id, "counter"))
        with trio.fail_after(30):
            replies = [await wire.reply_to(request_id) for request_id in range(6)]
    assert all(r["result"]["content"][0]["text"].strip() == "done" for r in replies), replies
    seen = [int(n) for n in (folder / "seen").read_text().split()]
    assert len(seen) == 6 and max(seen) <= 2


async def test_one_calls_slow_hooks_do_not_hold_up_another_call(home: Path, tmp_path: Path) -> None:
    """Eight slow hooks of one call fill that call's own hook bound only: another call's quick
    hook runs at once, and it is answered while the slow hooks are still running."""
    ended = tmp_path / "ended"
    ended.mkdir()
    slow = [{"matcher": "hash", "command": f"sleep 3; touch {ended}/$$"} for _ in range(8)]
    set_hooks(home, *slow, {"matcher": "uuid", "command": "true"})
    async with stdio_gateway(home) as wire:
        await wire.initialize()
        await wire.send(run_tool(1, "hash", {"text": "x"}))
        await trio.sleep(0.5)  # the slow call's hooks are running
        await wire.send(run_tool(2, "uuid"))
        with trio.fail_after(30):
            first = await wire.recv()
            assert list(ended.iterdir()) == []  # not one slow hook has finished yet
            second = await wire.recv()
    assert (first["id"], second["id"]) == (2, 1)
    assert "isError" not in first["result"] and "isError" not in second["result"]


@pytest.mark.parametrize(("argv", "kept", "ours", "expected"), [
    (["/bin/sh", "-c", "ulimit -n"], (1024, 4096), (4096, 4096),
     ["/bin/sh", "-c", "ulimit -S -n 1024 2>/dev/null; ulimit -n"]),
    (["/bin/sh", "-c", "echo $0 $1", "a", "b"], (1024, 4096), (4096, 4096),
     ["/bin/sh", "-c", "ulimit -S -n 1024 2>/dev/null; echo $0 $1", "a", "b"]),
    (["/bin/sh", "-c", "ulimit -n"], (1024, 4096), (1024, 4096), ["/bin/sh", "-c", "ulimit -n"]),
    (["/bin/sh", "-c", "ulimit -n"], None, (4096, 4096), ["/bin/sh", "-c", "ulimit -n"]),
    (["/usr/bin/python3", "tool.py"], (1024, 4096), (4096, 4096), ["/usr/bin/python3", "tool.py"]),
    (["/bin/sh"], (1024, 4096), (4096, 4096), ["/bin/sh"]),
])
def test_a_shell_child_takes_the_childrens_limit_before_its_command(
        monkeypatch: pytest.MonkeyPatch, argv: list[str], kept: tuple[int, int] | None,
        ours: tuple[int, int], expected: list[str]) -> None:
    """A `/bin/sh -c` child (hooks, shell tools) sets the children's soft open-files limit itself,
    first thing, when the gateway raised its own; every other argv is left as it is (those get
    the limit from outside, right after the spawn)."""
    monkeypatch.setattr(children, "_child_nofile", kept)
    monkeypatch.setattr(resource, "getrlimit", lambda which: ours)
    assert children._limited(argv) == expected
