"""The live configuration: the current good config, swapped whole on a valid reload.

A bad edit never replaces a good config: the last good one stays, the error is logged and
kept in `errors` (for `/health`).
"""

from __future__ import annotations

from pathlib import Path

import structlog
import trio

from tfunnel.config.load import REGISTER_FILE, STATE_FILE, load_register, load_state
from tfunnel.config.model import Register, Settings, ToolState
from tfunnel.errors import ConfigError
from tfunnel.gate.manifest import MANIFEST_FILE, HookManifest, load_manifest
from tfunnel.surface.catalog import Catalog

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
                 hooks: HookManifest) -> None:
        self.home = home
        self.settings = settings
        self.register = register
        self.state = state
        self.hooks = hooks
        self.catalog = Catalog(register, state)
        self.tools_changed = Changes()
        self.errors: dict[str, str] = {}

    def _swap(self) -> None:
        self.catalog = Catalog(self.register, self.state)
        self.tools_changed.bump()

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
