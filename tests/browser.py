"""Headless Chromium (Debian's `chromium`, driven by Playwright) for the admin UI's tests.

Playwright's sync API must be used from the one thread that started it, and a Trio test must
not block its own event loop, so the browser lives in a thread of its own: `Browser.do(fn)`
runs `fn(page)` there and awaits its result from Trio. The machine's network is closed, so
Chromium's own background traffic is switched off (it would fail, many requests at a time).
"""

from __future__ import annotations

import queue
import shutil
import threading
from collections.abc import AsyncIterator, Callable
from concurrent.futures import Future
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import trio

T = TypeVar("T")
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        "--disable-default-apps", "--mute-audio"]


class Browser:
    """One Chromium with one page, in its own thread."""

    def __init__(self, **context: Any) -> None:
        self._jobs: queue.Queue[tuple[Callable[[Any], Any], Future[Any]] | None] = queue.Queue()
        self._ready: Future[None] = Future()
        self._context = context
        self.console: list[str] = []  # console errors and page errors: a test asserts there are none
        self._thread = threading.Thread(target=self._main, name="chromium", daemon=True)

    def _main(self) -> None:
        from playwright.sync_api import sync_playwright

        try:
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
                context = browser.new_context(**self._context)
                context.set_default_timeout(15_000)
                page = context.new_page()
                page.on("console", lambda m: self.console.append(f"console {m.type}: {m.text}")
                        if m.type in ("error", "warning") else None)
                page.on("pageerror", lambda e: self.console.append(f"page error: {e}"))
                self._ready.set_result(None)
                while (job := self._jobs.get()) is not None:
                    fn, done = job
                    try:
                        done.set_result(fn(page))
                    except BaseException as exc:  # handed to the awaiting test
                        done.set_exception(exc)
                browser.close()
        except BaseException as exc:
            if not self._ready.done():
                self._ready.set_exception(exc)

    async def start(self) -> None:
        self._thread.start()
        await trio.to_thread.run_sync(self._ready.result, 60)

    async def do(self, fn: Callable[[Any], T], timeout: float = 30) -> T:
        """`fn(page)` in the browser's thread; its result, or what it raised."""
        done: Future[T] = Future()
        self._jobs.put((fn, done))
        with trio.fail_after(timeout):
            return await trio.to_thread.run_sync(done.result, abandon_on_cancel=True)

    async def stop(self) -> None:
        self._jobs.put(None)
        await trio.to_thread.run_sync(self._thread.join, 30)

    async def screenshot(self, path: Path) -> None:
        await self.do(lambda page: page.screenshot(path=str(path), full_page=True))


@asynccontextmanager
async def browser(**context: Any) -> AsyncIterator[Browser]:
    """A started browser (`context`: Playwright's new_context options, e.g. color_scheme)."""
    b = Browser(**context)
    await b.start()
    try:
        yield b
    finally:
        with trio.CancelScope(shield=True):
            await b.stop()
