"""Wrap mode and a real SIGTERM to a gateway process: neither the wrapped upstream nor its legacy
twin outlives it. The process-level part of tests/test_wrap_gate.py."""

from __future__ import annotations

import re
import signal
import sys
from pathlib import Path

import pytest

from tests.interop import CONFORMANCE_FIXTURE
from tests.test_wrap_gate import wrap_state
from tests.upstreams import set_upstreams
from tests.wire import alive, gateway, wait_gone

pytestmark = pytest.mark.timeout(60)


async def test_sigterm_leaves_neither_the_wrapped_upstream_nor_its_twin(home: Path) -> None:
    set_upstreams(home, {"id": "conf", "command": sys.executable,
                         "args": [str(CONFORMANCE_FIXTURE), "--prefix", "test_"]})
    wrap_state(home, {"passthrough": "conf"})
    async with gateway(home) as wire:
        await wire.initialize()
        pids = [int(p) for p in re.findall(rb'"pid": (\d+), "peer": "pid \d+", "event": "upstream starting"',
                                           wire.stderr)]
        assert b"legacy twin starting" in wire.stderr and all(alive(p) for p in pids[-2:])
        wire.proc.send_signal(signal.SIGTERM)
        assert await wire.wait_exit() == 143
    assert await wait_gone(pids) == []
