"""Headless Chromium (Debian's `chromium`, driven by Playwright) for the admin UI's tests.

Playwright's sync API must be used from the one thread that started it, and a Trio test must
not block its own event loop, so Chromium lives in a thread of its own: `Browser.do(fn)` runs
`fn(page)` there and awaits its result from Trio. One Chromium serves every test of the
process (launched at the first `browser()`, closed when the process exits); each test gets a
context of its own (its own cookies, storage, color scheme and viewport) with one page, closed
after it. A Chromium that died is launched again for the next test. The machine's network is
closed, so Chromium's own background traffic is switched off (it would fail, many requests at a
time).
"""

from __future__ import annotations

import atexit
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


class _Disconnected(RuntimeError):
    """The shared Chromium is gone (crashed or closed)."""


class _Chromium:
    """The process's one Chromium, in its own thread: `submit(fn)` runs `fn(browser)` there."""

    def __init__(self) -> None:
        self._jobs: queue.Queue[tuple[Callable[[Any], Any], Future[Any]] | None] = queue.Queue()
        self._ready: Future[None] = Future()
        self._thread = threading.Thread(target=self._main, name="chromium", daemon=True)
        self._thread.start()

    def _main(self) -> None:
        from playwright.sync_api import sync_playwright

        try:
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
                self._ready.set_result(None)
                while (job := self._jobs.get()) is not None:
                    fn, done = job
                    try:
                        done.set_result(fn(browser))
                    except BaseException as exc:  # handed to the awaiting test
                        done.set_exception(exc)
                browser.close()
        except BaseException as exc:
            if not self._ready.done():
                self._ready.set_exception(exc)
        finally:
            while True:  # what was queued after the end is refused, not left waiting
                try:
                    job = self._jobs.get_nowait()
                except queue.Empty:
                    break
                if job is not None:
                    job[1].set_exception(RuntimeError("the shared Chromium has stopped"))

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def wait_ready(self, timeout: float) -> None:
        self._ready.result(timeout)

    def submit(self, fn: Callable[[Any], T]) -> Future[T]:
        done: Future[T] = Future()
        self._jobs.put((fn, done))
        return done

    def stop(self) -> None:
        self._jobs.put(None)
        self._thread.join(30)


_SHARED: list[_Chromium] = []
_SHARED_LOCK = threading.Lock()


def _shared() -> _Chromium:
    with _SHARED_LOCK:
        if not _SHARED or not _SHARED[0].alive:
            if not _SHARED:
                atexit.register(_stop_shared)
            _SHARED[:] = [_Chromium()]
        return _SHARED[0]


def _stop_shared() -> None:
    with _SHARED_LOCK:
        for chromium in _SHARED:
            chromium.stop()
        _SHARED.clear()


class Browser:
    """One page in a context of its own, on the shared Chromium."""

    def __init__(self, **context: Any) -> None:
        self._options = context
        self._chromium: _Chromium | None = None
        self._context: Any = None
        self._page: Any = None
        self.console: list[str] = []  # console errors and page errors: a test asserts there are none

    def _open(self, browser: Any) -> None:
        if not browser.is_connected():
            raise _Disconnected("the shared Chromium is not connected")
        self._context = browser.new_context(**self._options)
        self._context.set_default_timeout(15_000)
        page = self._context.new_page()
        page.on("console", lambda m: self.console.append(f"console {m.type}: {m.text}")
                if m.type in ("error", "warning") else None)
        page.on("pageerror", lambda e: self.console.append(f"page error: {e}"))
        self._page = page

    async def start(self) -> None:
        for attempt in range(2):
            chromium = _shared()
            await trio.to_thread.run_sync(chromium.wait_ready, 60)
            try:
                await trio.to_thread.run_sync(chromium.submit(self._open).result, 60)
            except _Disconnected:
                if attempt:
                    raise
                await trio.to_thread.run_sync(chromium.stop)  # dead: the next `_shared()` launches anew
                continue
            self._chromium = chromium
            return

    async def do(self, fn: Callable[[Any], T], timeout: float = 30) -> T:
        """`fn(page)` in the browser's thread; its result, or what it raised."""
        assert self._chromium is not None, "start() first"
        page = self._page
        done = self._chromium.submit(lambda _browser: fn(page))
        with trio.fail_after(timeout):
            return await trio.to_thread.run_sync(done.result, abandon_on_cancel=True)

    async def stop(self) -> None:
        if self._chromium is None or self._context is None:
            return
        context = self._context
        self._context = self._page = None
        await trio.to_thread.run_sync(self._chromium.submit(lambda _browser: context.close()).result, 30)

    async def screenshot(self, path: Path) -> None:
        await self.do(lambda page: page.screenshot(path=str(path), full_page=True))


@asynccontextmanager
async def browser(**context: Any) -> AsyncIterator[Browser]:
    """A page on the shared Chromium (`context`: Playwright's new_context options, e.g.
    color_scheme), its context closed at the end."""
    b = Browser(**context)
    await b.start()
    try:
        yield b
    finally:
        with trio.CancelScope(shield=True):
            await b.stop()
