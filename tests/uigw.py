"""The admin UI as a real process: `tfunnel ui --port 0`, or `serve --http --ui --ui-port 0`; its
URL, its CSRF token (read from the page, as a browser does) and a small client for its API."""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
import trio

from tests.httpgw import HttpGateway, http_gateway
from tests.wire import gateway_argv, kill_group

_TOKEN = re.compile(r'<meta name="tfunnel-csrf" content="([^"]+)"')


def ui_url(stderr: bytes | bytearray) -> str | None:
    """The URL of the `admin ui listening` log line, if it was written."""
    for line in bytes(stderr).splitlines():
        if b"admin ui listening" in line:
            try:
                return str(json.loads(line)["url"])
            except (ValueError, KeyError):
                continue
    return None


@dataclass
class Ui:
    url: str
    token: str = ""
    proc: trio.Process | None = None
    stderr: bytearray = field(default_factory=bytearray)
    gateway: HttpGateway | None = None

    @property
    def origin(self) -> str:
        return self.url

    def headers(self, **extra: str) -> dict[str, str]:
        """What the page's own fetch sends with a change."""
        return {"content-type": "application/json", "x-tfunnel-csrf": self.token, "origin": self.origin,
                "sec-fetch-site": "same-origin", **extra}

    async def op(self, http: httpx2.AsyncClient, name: str, args: Mapping[str, Any]) -> dict[str, Any]:
        """Run a management operation as the page does; its JSON answer (any status)."""
        answer = await http.post(f"{self.url}/api/op/{name}", json=dict(args), headers=self.headers())
        value: dict[str, Any] = answer.json()
        value["_status"] = answer.status_code
        return value

    async def view(self, http: httpx2.AsyncClient, name: str) -> dict[str, Any]:
        answer = await http.get(f"{self.url}/api/{name}")
        assert answer.status_code == 200, answer.text
        value: dict[str, Any] = answer.json()
        return value


async def read_token(url: str) -> str:
    async with httpx2.AsyncClient(timeout=10) as http:
        page = await http.get(f"{url}/")
    assert page.status_code == 200, page.text
    match = _TOKEN.search(page.text)
    assert match is not None, "the page carries no CSRF token"
    return match.group(1)


@asynccontextmanager
async def ui_alone(home: Path, *args: str) -> AsyncIterator[Ui]:
    """A running `tfunnel ui --port 0` (no gateway) and its token."""
    proc = await trio.lowlevel.open_process(
        [*gateway_argv(home, "--log-format", "json"), "ui", "--port", "0", *args],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        env=dict(os.environ), start_new_session=True)
    ui = Ui("", proc=proc)
    bound = trio.Event()

    async def drain() -> None:
        assert proc.stderr is not None
        while chunk := await proc.stderr.receive_some(65536):
            ui.stderr += chunk
            if not bound.is_set() and (url := ui_url(ui.stderr)) is not None:
                ui.url = url
                bound.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(drain)
        try:
            with trio.fail_after(30):
                await bound.wait()
            ui.token = await read_token(ui.url)
            yield ui
        finally:
            with trio.CancelScope(shield=True):
                await kill_group(proc)
            nursery.cancel_scope.cancel()


@asynccontextmanager
async def ui_gateway(home: Path, env: Mapping[str, str] | None = None, *args: str) -> AsyncIterator[Ui]:
    """A running `tfunnel serve --http --ui --ui-port 0` (its upstreams started) and its UI."""
    async with http_gateway(home, env, "--ui", "--ui-port", "0", *args) as gw:
        url = ui_url(gw.stderr)
        assert url is not None, gw.stderr.decode(errors="replace")
        yield Ui(url, await read_token(url), gw.proc, gw.stderr, gw)
