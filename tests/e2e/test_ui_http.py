"""The admin UI as a real process: a taken port is named and nothing is left running, and a real
SIGTERM ends `tfunnel ui` with status 0. The process-level part of tests/test_ui_http.py."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import pytest
import trio

from tests.uigw import ui_alone
from tests.wire import alive, gateway_argv

pytestmark = pytest.mark.timeout(120)


async def test_a_taken_port_is_named_nothing_is_left_running_and_sigterm_ends_the_ui(home: Path) -> None:
    async with ui_alone(home) as ui:
        port = ui.url.rsplit(":", 1)[1]
        for argv in (["ui", "--port", port], ["serve", "--http", "--port", "0", "--ui", "--ui-port", port]):
            with trio.fail_after(60):
                done = await trio.run_process([*gateway_argv(home, "--log-format", "json"), *argv],
                                              capture_stdout=True, capture_stderr=True, check=False,
                                              stdin=subprocess.DEVNULL)
            stderr = done.stderr.decode()
            assert done.returncode == 1, stderr
            assert f"the admin UI cannot listen on 127.0.0.1:{port}: Address already in use" in stderr
            for record in (json.loads(line) for line in stderr.splitlines() if line.startswith("{")):
                if record.get("event") == "upstream starting":  # the gateway's upstream stopped with it
                    assert not alive(record["pid"]), record
        assert ui.proc is not None
        ui.proc.send_signal(signal.SIGTERM)
        with trio.fail_after(20):
            assert await ui.proc.wait() == 0
