"""Upstream notifications for the clients that asked for them: log messages and resource updates.

Clients ask in their era's way: a legacy session with `logging/setLevel` and
`resources/subscribe`; a modern client with a request's `logLevel` (for that request only) and a
`subscriptions/listen` stream's `resourceSubscriptions`. Each asking party is a listener with a
`push` (non-blocking, bounded by its connection: a client that does not read loses notices, never
stalls an upstream). From the union of what listeners want, the hub tells the supervisor which
URIs each upstream must report and the lowest log level any legacy session asked for; the
supervisor keeps that across upstream restarts and replays it.

Everything here is synchronous: pushes never wait.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from tfunnel.protocol.jsonrpc import Notification, notification_message

LEVELS = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")
_RANK = {level: rank for rank, level in enumerate(LEVELS)}

Push = Callable[[dict[str, Any]], None]
Key = tuple[str, str]  # (upstream, its own URI)


def via(notify: Callable[[str, dict[str, Any]], None]) -> Push:
    """A push onto a peer's `notify_nowait(method, params)`."""
    def push(message: dict[str, Any]) -> None:
        notify(message["method"], message.get("params") or {})
    return push


def rank(level: Any) -> int | None:
    """The order of a log level (None for anything that is not one)."""
    return _RANK.get(level) if isinstance(level, str) else None


@dataclass
class _Listener:
    push: Push
    level: str | None = None
    uris: dict[Key, str] = field(default_factory=dict)  # → the URI as the client wrote it
    tag: Mapping[str, Any] | None = None  # a listen stream's `_meta` (its subscription id)
    upstream: str | None = None  # a modern request's logs: only those of the upstream it calls
    # A legacy session's profile: the upstreams whose log messages it may hear (None: all).
    hears: Callable[[str], bool] | None = None


class Notices:
    def __init__(self, subscriptions: Callable[[str, frozenset[str]], None] = lambda u, uris: None,
                 log_level: Callable[[str | None], None] = lambda level: None,
                 wrapped: Callable[[], str | None] = lambda: None) -> None:
        """`wrapped`: the wrapped upstream's id under a wrap, whose notices alone reach clients,
        as it wrote them."""
        self._subscriptions = subscriptions
        self._log_level = log_level
        self._wrapped = wrapped
        self._listeners: dict[object, _Listener] = {}
        self._wanted: dict[str, frozenset[str]] = {}
        self._level: str | None = None

    # --- legacy sessions -------------------------------------------------------------------------

    def set_level(self, key: object, push: Push, level: str,
                  hears: Callable[[str], bool] | None = None) -> None:
        """A legacy session's log level; `hears` says which upstreams' messages reach it (its
        profile's)."""
        listener = self._listener(key, push)
        listener.level, listener.hears = level, hears
        self._changed()

    def subscribe(self, key: object, push: Push, upstream: str, original: str, uri: str) -> None:
        self._listener(key, push).uris[upstream, original] = uri
        self._changed()

    def unsubscribe(self, key: object, upstream: str, original: str) -> None:
        listener = self._listeners.get(key)
        if listener is not None:
            listener.uris.pop((upstream, original), None)
            self._changed()

    def drop(self, key: object) -> None:
        """The session ended: it asks for nothing any more."""
        if self._listeners.pop(key, None) is not None:
            self._changed()

    # --- modern requests -------------------------------------------------------------------------

    @contextmanager
    def listening(self, key: object, push: Push, uris: Mapping[Key, str],
                  tag: Mapping[str, Any]) -> Iterator[None]:
        """A listen stream's resource subscriptions, for as long as it is open."""
        self._listeners[key] = _Listener(push, uris=dict(uris), tag=dict(tag))
        self._changed()
        try:
            yield
        finally:
            self.drop(key)

    @contextmanager
    def during(self, upstream: str, level: str | None, push: Push | None) -> Iterator[None]:
        """A modern request's log messages from `upstream` while it runs (only when it asked)."""
        if level is None or rank(level) is None or push is None:
            yield
            return
        key = object()
        self._listeners[key] = _Listener(push, level=level, upstream=upstream)
        try:
            yield
        finally:
            self._listeners.pop(key, None)

    # --- from upstreams --------------------------------------------------------------------------

    def upstream_notice(self, upstream: str, note: Notification) -> None:
        """An upstream's `notifications/message` or `notifications/resources/updated`, to the
        listeners that asked for it (anything else, or anything malformed, is dropped)."""
        params = note.params
        wrapped = self._wrapped()
        if wrapped is not None and upstream != wrapped:
            return
        if note.method == "notifications/message":
            level = rank(params.get("level"))
            if level is None:
                return
            logger = params.get("logger")
            tagged = {"level": params["level"], "logger": f"{upstream}/{logger}" if isinstance(logger, str)
                      and logger else upstream, "data": params.get("data")}
            if wrapped is not None:  # the upstream is the server: its logger names are its own
                tagged = {k: v for k, v in params.items() if k != "_meta"}
            message = notification_message("notifications/message", tagged)
            for listener in list(self._listeners.values()):
                wanted = rank(listener.level)
                if wanted is not None and wanted <= level and listener.upstream in (None, upstream) \
                        and (listener.hears is None or listener.hears(upstream)):
                    listener.push(message)
        elif note.method == "notifications/resources/updated":
            original = params.get("uri")
            if not isinstance(original, str):
                return
            for listener in list(self._listeners.values()):
                uri = listener.uris.get((upstream, original))
                if uri is not None:
                    out: dict[str, Any] = {"uri": uri}
                    if listener.tag is not None:
                        out["_meta"] = dict(listener.tag)
                    listener.push(notification_message("notifications/resources/updated", out))

    # --- the parts -------------------------------------------------------------------------------

    def _listener(self, key: object, push: Push) -> _Listener:
        listener = self._listeners.get(key)
        if listener is None:
            listener = self._listeners[key] = _Listener(push)
        return listener

    def _changed(self) -> None:
        """Tell the supervisor what changed in the union of what the listeners want."""
        wanted: dict[str, set[str]] = {}
        levels: list[int] = []
        for listener in self._listeners.values():
            for upstream, original in listener.uris:
                wanted.setdefault(upstream, set()).add(original)
            if listener.upstream is None and (r := rank(listener.level)) is not None:
                levels.append(r)
        for upstream in sorted(set(wanted) | set(self._wanted)):
            uris = frozenset(wanted.get(upstream, ()))
            if uris != self._wanted.get(upstream, frozenset()):
                self._subscriptions(upstream, uris)
            if uris:
                self._wanted[upstream] = uris
            else:
                self._wanted.pop(upstream, None)
        level = LEVELS[min(levels)] if levels else None
        if level != self._level:
            self._level = level
            self._log_level(level)
