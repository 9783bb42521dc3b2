"""The config watcher (config/watch.py): what counts as a change, and where it starts from."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from tfunnel.config.watch import Signature, signature, watch_files

pytestmark = pytest.mark.timeout(30)


async def _watch_for(path: Path, seconds: float, seen: dict[Path, Signature] | None = None) -> list[str]:
    calls: list[str] = []
    with trio.move_on_after(seconds):
        await watch_files({path: lambda: calls.append("changed")}, interval=0.02, debounce=0.02, seen=seen)
    return calls


@pytest.mark.parametrize("edit", ["rewrite", "remove", "create"])
async def test_an_edit_between_the_first_read_and_the_watch_is_applied(tmp_path: Path, edit: str) -> None:
    """A file changed after the gateway read it but before its watch began is still reported
    when the watch starts from the signature taken at the read."""
    path = tmp_path / "f.json"
    if edit != "create":
        path.write_text("{}")
    read_as = {path: signature(path)}
    if edit == "remove":
        path.unlink()
    else:
        path.write_text('{"changed": true, "longer": "than before"}')
    assert await _watch_for(path, 0.5, seen=read_as) == ["changed"]
    # Without the read's signature the edit would have become the baseline: nothing reported.
    assert await _watch_for(path, 0.3) == []
