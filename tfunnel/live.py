"""The live configuration: the current good config, swapped whole on a valid reload.

A bad edit never replaces a good config: the last good one stays, the error is logged and
kept in `errors` (for `/health`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import structlog
import trio

from tfunnel.config.expose import EXPOSE_FILE, ExposeConfig, load_expose
from tfunnel.config.load import REGISTER_FILE, STATE_FILE, load_register, load_state
from tfunnel.config.model import Register, Settings, ToolState
from tfunnel.errors import ConfigError
from tfunnel.gate.manifest import MANIFEST_FILE, HookManifest, load_manifest
from tfunnel.surface.catalog import Catalog
from tfunnel.surface.upstream_tools import assemble

ReadyTools = Callable[[], Mapping[str, Sequence[Mapping[str, Any]]]]

log = structlog.get_logger("tfunnel.config")


class Changes:
    """A coalescing change counter: a waiter learns that something changed since it last looked,
    however many changes happened in between."""

    def __init__(self) -> None:
        self.version = 0
        self._event = trio.Event()

    def bump(self) -> None:
        self.version += 1
        self._event.set()
        self._event = trio.Event()

    async def wait_beyond(self, seen: int) -> int:
        while self.version <= seen:
            await self._event.wait()
        return self.version


class Live:
    def __init__(self, home: Path, settings: Settings, register: Register, state: ToolState,
                 hooks: HookManifest, expose: ExposeConfig) -> None:
        self.home = home
        self.settings = settings
        self.register = register
        self.state = state
        self.hooks = hooks
        self.expose = expose
        self.ready_tools: ReadyTools = dict
        self.catalog = Catalog(register, state)
        self.tools_changed = Changes()
        self.errors: dict[str, str] = {}
        # Set once every upstream connected or failed its first attempt (or the deadline passed).
        self.started = trio.Event()

    def _swap(self) -> None:
        local = Catalog(self.register, self.state)
        upstream = assemble(self.ready_tools(), self.expose.expose, local.local_names())
        self.catalog = Catalog(self.register, self.state, upstream)
        # Clients list tools at once, upstreams or not: each upstream that comes up later is news.
        self.tools_changed.bump()

    def upstreams_changed(self) -> None:
        """An upstream came up, went down or re-listed its tools."""
        self._swap()

    def reload_expose(self) -> ExposeConfig | None:
        """The new `mcp/expose.json` if valid (for the supervisor), else None (current kept)."""
        try:
            expose = load_expose(self.home)
        except ConfigError as exc:
            self.errors[EXPOSE_FILE] = str(exc)
            log.error("expose.json reload refused; keeping the current upstreams", error=str(exc))
            return None
        self.errors.pop(EXPOSE_FILE, None)
        if expose != self.expose:
            self.expose = expose
            log.info("expose.json reloaded", upstreams=len(expose.upstreams))
            self._swap()
        return expose

    def reload_register(self) -> bool:
        try:
            register = load_register(self.home)
        except ConfigError as exc:
            self.errors[REGISTER_FILE] = str(exc)
            log.error("register reload refused; keeping the last good register", error=str(exc))
            return False
        self.errors.pop(REGISTER_FILE, None)
        if register == self.register:
            return True
        self.register = register
        log.info("register reloaded", tools=len(register.tools))
        self._swap()
        return True

    def reload_state(self) -> bool:
        state, problems = load_state(self.home)
        if problems:
            text = "; ".join(str(p) for p in problems)
            self.errors[STATE_FILE] = text
            log.warning("tool state has problems; those entries use defaults", error=text)
        else:
            self.errors.pop(STATE_FILE, None)
        if state == self.state:
            return not problems
        self.state = state
        log.info("tool state reloaded", entries=len(state.entries))
        self._swap()
        return not problems

    def reload_hooks(self) -> bool:
        """Swap in a re-read manifest (with its overlay); a bad one keeps the current hooks."""
        try:
            hooks = load_manifest(self.home)
        except ConfigError as exc:
            self.errors[MANIFEST_FILE] = str(exc)
            log.error("hook manifest reload refused; keeping the current hooks", error=str(exc))
            return False
        self.errors.pop(MANIFEST_FILE, None)
        if hooks != self.hooks:
            self.hooks = hooks
            log.info("hooks reloaded", enabled=sum(1 for h in hooks.hooks if h.enabled))
        return True
