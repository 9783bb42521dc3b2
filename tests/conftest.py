"""Test plumbing: run `async def` tests under trio, and build temp config homes."""

from __future__ import annotations

import functools
import inspect
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from tfunnel.config.home import seed_dir, seed_home

FIXTURES = Path(__file__).resolve().parent / "fixtures"
# What the tests start as `python3` (the seed home's demo upstream, hook and tool scripts) is the
# test's own interpreter, not whatever PATH finds first: a version manager's shim costs about
# 0.2 s a start, which every gateway start and hook run would pay.
os.environ["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
# The process-level tier: tests whose subject is the process, a signal, a real socket or a
# third-party program. Everything else runs the gateway in-process (`tfunnel.testing.gateway`).
E2E = Path(__file__).resolve().parent / "e2e"


# In-process test functions that take 0.3 s or more (what they wait for is real: a hook's process,
# a timeout they prove); written from a run's durations by scripts/slow_tests.py.
_SLOW_LIST = Path(__file__).resolve().parent / "slow.txt"
SLOW = frozenset(line.strip() for line in _SLOW_LIST.read_text().splitlines()
                 if line.strip() and not line.startswith("#"))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test under tests/e2e/ `e2e`, and the in-process ones tests/slow.txt names `slow`
    (`scripts/test --fast` leaves both out)."""
    for item in items:
        if E2E in item.path.parents:
            item.add_marker(pytest.mark.e2e)
        elif item.nodeid.split("[", 1)[0] in SLOW:
            item.add_marker(pytest.mark.slow)


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
