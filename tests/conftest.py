"""Test plumbing: run `async def` tests under trio, and build temp config homes."""

from __future__ import annotations

import functools
import inspect
import json
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from tfunnel.config.home import seed_dir, seed_home

FIXTURES = Path(__file__).resolve().parent / "fixtures"


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    """Run coroutine tests with `trio.run`; `@pytest.mark.trio_clock` gives them a MockClock."""
    fn = pyfuncitem.obj
    if not inspect.iscoroutinefunction(fn):
        return None
    kwargs = {name: pyfuncitem.funcargs[name] for name in pyfuncitem._fixtureinfo.argnames}
    clock = None
    if pyfuncitem.get_closest_marker("trio_clock") is not None:
        clock = trio.testing.MockClock(autojump_threshold=0)
    trio.run(functools.partial(fn, **kwargs), clock=clock)
    return True


def add_tools(home: Path, *entries: dict[str, Any], scripts: tuple[str, ...] = ()) -> None:
    """Append register entries to a home and copy fixture scripts into its tools/scripts."""
    for name in scripts:
        (home / "tools" / "scripts" / name).write_bytes((FIXTURES / name).read_bytes())
    path = home / "tools" / "tools.register.json"
    register = json.loads(path.read_text())
    register["tools"].extend(entries)
    path.write_text(json.dumps(register, indent=2))


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """A fresh config home seeded from the bundled conf/."""
    path = tmp_path / "home"
    seed_home(path, seed_dir())
    return path
