"""The live configuration: the current good config, swapped whole on a valid reload.

Every `reload_*` re-reads one file through `LiveFiles.reread` (`config.files`), the one rule: a
valid file replaces the version in force; a missing, unreadable or malformed one never does (the
last good version stays, the error is logged and kept in `errors` for `/health`). The hook manifest
and its overlay are separate files with separate last good versions, combined in `hooks`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import structlog
import trio

from tfunnel.config.expose import EXPOSE, ExposeConfig
from tfunnel.config.files import ConfigFile, LiveFiles
from tfunnel.config.load import REGISTER, SETTINGS, STATE
from tfunnel.config.model import Register, ToolState
from tfunnel.gate.manifest import HOOK_STATE, MANIFEST, HookManifest, with_overlay
from tfunnel.home.files import HomeReading
from tfunnel.observe.audit import LOG_CONFIG, LogConfig
from tfunnel.surface.catalog import Catalog
from tfunnel.surface.changes import Changes
from tfunnel.surface.upstream_items import Extras
from tfunnel.surface.upstream_tools import OnCollision, assemble, assemble_wrapped

ReadyTools = Callable[[], Mapping[str, Sequence[Mapping[str, Any]]]]
# Every ready upstream's lists by kind (`upstream.listing`: tools, prompts, resources, templates;
# a kind the upstream does not declare is absent).
ReadyLists = Callable[[], Mapping[str, Mapping[str, Sequence[Mapping[str, Any]]]]]
T = TypeVar("T")

log = structlog.get_logger("tfunnel.config")



def _as_read(register: Register) -> Register:
    return register


class Live:
    def __init__(self, home: Path, start: HomeReading,
                 served: Callable[[Register], Register] = _as_read) -> None:
        """The config a start read (`start.refuse_start()` already passed); logs its warnings.
        `served` turns each register version into what is served (the composition root gives
        the management tools' own schemas to the entries of ToolFunnel's it adopts)."""
        self.home = home
        self.files = LiveFiles(home, start.readings)
        self.settings = start.value(SETTINGS)
        self._served = served
        self._register_read = start.value(REGISTER)  # compared with each reload: a same file is no news
        self.register = served(self._register_read)
        self.state = start.value(STATE)
        self._manifest = start.value(MANIFEST)
        self._overlay = start.value(HOOK_STATE)
        self.hooks = with_overlay(self._manifest, self._overlay)
        self.expose = start.value(EXPOSE)
        self.log_config = start.value(LOG_CONFIG)
        self.ready_tools: ReadyTools = dict
        self.ready_lists: ReadyLists = dict
        # Which upstream items are held for approval: upstream -> item key -> the refusal.
        self.holds: Callable[[], Mapping[str, Mapping[str, str]]] = dict
        # Told of each upstream tool name collision once per process (the gateway audits it).
        self.on_collision: OnCollision = lambda upstream, tool, surfaced: None
        self.catalog = Catalog(self.register, self.state)
        self.tools_changed = Changes()
        # Set once every upstream connected or failed its first attempt (or the deadline passed).
        self.started = trio.Event()

    @property
    def errors(self) -> dict[str, str]:
        """Refused or broken files → why (what `/health` lists; any makes it `degraded`)."""
        return self.files.errors

    @property
    def warnings(self) -> list[str]:
        """The warnings of the files in force, sorted by file (`/health` `config.warnings`)."""
        return [str(w) for w in self.files.warnings()]

    def _swap(self) -> None:
        local = Catalog(self.register, self.state)
        lists = self.ready_lists()
        holds = self.holds()
        wrap = local.wrap
        if wrap is None:
            upstream = tuple(assemble(self.ready_tools(), self.expose.expose, local.local_names(), holds,
                                      self.on_collision, self.expose.name_prefix))
        else:  # the wrapped upstream is the whole surface (nothing of it while it is down)
            lists = {u: kinds for u, kinds in lists.items() if u == wrap.upstream}
            upstream = tuple(assemble_wrapped(wrap.upstream, self.ready_tools().get(wrap.upstream, ()),
                                              self.expose.expose, holds, self.expose.name_prefix))
        extras = Extras.assemble({u: kinds.get("prompts", ()) for u, kinds in lists.items()},
                                 {u: kinds.get("resources", ()) for u, kinds in lists.items()},
                                 {u: kinds.get("templates", ()) for u, kinds in lists.items()},
                                 [u for u, kinds in lists.items() if "resources" in kinds], holds,
                                 wrapped=wrap is not None)
        old = self.catalog
        state = old.state != self.state  # visibility of every kind may have changed
        changed = [kind for kind, differs in (
            ("tools", state or (old.register, old.upstream) != (self.register, upstream)),
            ("prompts", state or old.extras.prompts != extras.prompts),
            ("resources", state or (old.extras.resources, old.extras.templates)
             != (extras.resources, extras.templates))) if differs]
        if not changed and old.extras.resource_upstreams == extras.resource_upstreams:
            # The same inputs make the same surface (an upstream re-listed the same tools, one
            # without tools came up, an expose edit touched nothing visible): no news for anyone.
            return
        self.catalog = Catalog(self.register, self.state, upstream, extras)
        # Clients list at once, upstreams or not: each upstream that comes up later is news.
        if changed:
            self.tools_changed.bump(*changed)

    def upstreams_changed(self) -> None:
        """An upstream came up, went down or re-listed its tools."""
        self._swap()

    def _reload(self, spec: ConfigFile[T], current: T, apply: Callable[[T], None]) -> T | None:
        """Re-read `spec` by the one rule; call `apply` when a valid version differs from `current`."""
        new = self.files.reread(spec)
        if new is not None and new != current:
            apply(new)
        return new

    def reload_expose(self) -> ExposeConfig | None:
        """The new `mcp/expose.json` if valid (for the supervisor), else None (current kept)."""
        def apply(expose: ExposeConfig) -> None:
            self.expose = expose
            log.info("expose.json reloaded", upstreams=len(expose.upstreams))
            self._swap()
        return self._reload(EXPOSE, self.expose, apply)

    def reload_register(self) -> bool:
        def apply(register: Register) -> None:
            self._register_read = register
            self.register = self._served(register)
            log.info("register reloaded", tools=len(register.tools))
            self._swap()
        return self._reload(REGISTER, self._register_read, apply) is not None

    def reload_state(self) -> bool:
        def apply(state: ToolState) -> None:
            self.state = state
            log.info("tool state reloaded", entries=len(state.entries))
            self._swap()
        return self._reload(STATE, self.state, apply) is not None

    def reload_hook_manifest(self) -> bool:
        """A valid manifest replaces the hooks (the overlay still applies); a bad one keeps them."""
        def apply(manifest: HookManifest) -> None:
            self._manifest = manifest
            self._hooks_changed()
        return self._reload(MANIFEST, self._manifest, apply) is not None

    def reload_hook_state(self) -> bool:
        """A valid overlay replaces the last one; a bad or deleted one keeps it (and its switches)."""
        def apply(overlay: dict[str, bool]) -> None:
            self._overlay = overlay
            self._hooks_changed()
        return self._reload(HOOK_STATE, self._overlay, apply) is not None

    def _hooks_changed(self) -> None:
        hooks = with_overlay(self._manifest, self._overlay)
        if hooks != self.hooks:
            self.hooks = hooks
            log.info("hooks reloaded", enabled=sum(1 for h in hooks.hooks if h.enabled))

    def reload_log_config(self) -> LogConfig | None:
        """The new `logs/log.config.json` if valid (for the audit log), else None: a file that
        breaks while running never switches the audit log off."""
        def apply(config: LogConfig) -> None:
            self.log_config = config
            log.info("log config reloaded", enabled=config.enabled)
        return self._reload(LOG_CONFIG, self.log_config, apply)
