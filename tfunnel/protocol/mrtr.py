"""The `requestState` of multi round-trip requests (PROTOCOL.md §3.8), sans-IO.

When a modern request needs input first (a gate asking for approval, an upstream asking for
elicitation), the result is `input_required` with an opaque `requestState` that the client
echoes on its retry. The client is untrusted, so the state is sealed: an HMAC-SHA256 over a small
JSON payload carrying an expiry and a binding to the originating request (its method and
params, minus the fields a retry adds). This module owns that format, the binding and the digest
of a gate question; `Sealer.open` raises only `RequestStateError`.

Token format: `v1.<b64url(payload JSON)>.<b64url(HMAC-SHA256(key, "v1." + payload part))>`,
base64url without padding.

Keys: one per process by default. Instances behind one proxy share theirs through a `KeySource`
(`home/state_key.py` reads `toolfunnel.json` `stateKeyFile`): it seals with the current key and
opens with any key it still accepts (a rotated-out key, for one expiry window), so a retry may land
on another instance. A token no accepted key opens makes the source look again once (another
instance may have rotated a moment ago) before it is refused.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import math
import re
import secrets
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from tfunnel.errors import ProtocolError
from tfunnel.protocol.jsonrpc import INVALID_PARAMS

VERSION = "v1"
# Far above what approvals plus a parked upstream state need; bounds the work a forged token costs.
MAX_TOKEN_CHARS = 64 * 1024
DEFAULT_TTL_S = 600.0
# Fields a retry adds to the original params; the binding must not see them.
RETRY_FIELDS = frozenset({"_meta", "inputResponses", "requestState"})
_B64URL = re.compile(r"[A-Za-z0-9_-]+")
MIN_KEY_BYTES = 16


class RequestStateError(ProtocolError):
    """A `requestState` we did not issue, or issued for another request, or expired (-32602).

    The reason names the failed check and never echoes the token."""

    def __init__(self, reason: str | None = None) -> None:
        message = "Invalid params: invalid or expired requestState"
        super().__init__(INVALID_PARAMS, f"{message} ({reason})" if reason else message)
        self.reason = reason


@dataclass(frozen=True)
class RequestState:
    """What a sealed `requestState` carries."""

    binding: str
    expires_at: float
    approved: tuple[str, ...] = ()
    upstream_state: str | None = None
    parked: str | None = None
    # The gate questions (digests) asked in the round that issued this state: only answers to
    # these count on the retry, so a client cannot pre-answer a question it was never asked.
    asked: tuple[str, ...] = ()


def binding(method: str, params: Mapping[str, Any]) -> str:
    """The sha256 hex digest that ties a state to its request: method and params, minus the
    fields a retry adds (`_meta`, `inputResponses`, `requestState`). Raises `TypeError` for a
    value JSON cannot encode (never the case for params that came from JSON)."""
    kept = {k: v for k, v in params.items() if k not in RETRY_FIELDS}
    canonical = json.dumps({"method": method, "params": kept}, sort_keys=True, separators=(",", ":"),
                           ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def question_digest(message: str) -> str:
    """A short stable name for a gate's question, to record which ones the user approved."""
    return hashlib.sha256(message.encode("utf-8")).hexdigest()[:16]


@dataclass(frozen=True)
class KeyRing:
    """The key that seals, and every key that opens (the sealing one first)."""

    seal: bytes
    open: tuple[bytes, ...]


class KeySource(Protocol):
    def ring(self) -> KeyRing:
        """The keys in force now (cheap: called for every seal and open)."""

    def refresh(self) -> bool:
        """Look for new keys at once; True when the ring changed."""


class _OneKey:
    def __init__(self, key: bytes) -> None:
        self._ring = KeyRing(key, (key,))

    def ring(self) -> KeyRing:
        return self._ring

    def refresh(self) -> bool:
        return False


class Sealer:
    """Seals and opens `requestState` tokens: with `key`, with the keys of `keys` (shared by
    instances), or with a random key of this process."""

    def __init__(self, key: bytes | None = None, *, keys: KeySource | None = None,
                 ttl_s: float = DEFAULT_TTL_S, clock: Callable[[], float] = time.time) -> None:
        if key is not None and len(key) < MIN_KEY_BYTES:
            raise ValueError(f"a requestState key needs at least {MIN_KEY_BYTES} bytes")
        if key is not None and keys is not None:
            raise ValueError("give a key or a key source, not both")
        if not (math.isfinite(ttl_s) and ttl_s > 0):
            raise ValueError("ttl_s must be a positive number of seconds")
        self._keys = keys or _OneKey(secrets.token_bytes(32) if key is None else bytes(key))
        self._ttl_s = ttl_s
        self._clock = clock

    def seal(self, binding: str, *, approved: Iterable[str] = (), upstream_state: str | None = None,
             parked: str | None = None, asked: Iterable[str] = ()) -> str:
        """A token for `binding` that expires `ttl_s` from now. Raises `ValueError` when it would
        be longer than `open` accepts."""
        payload = {"b": binding, "e": self._clock() + self._ttl_s, "a": list(approved),
                   "u": upstream_state, "p": parked, "q": list(asked)}
        body = _b64(json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode("utf-8"))
        token = f"{VERSION}.{body}.{_mac(self._keys.ring().seal, body)}"
        if len(token) > MAX_TOKEN_CHARS:
            raise ValueError(f"the sealed requestState would exceed {MAX_TOKEN_CHARS} characters")
        return token

    def open(self, token: object, binding: str) -> RequestState:
        """The state sealed in `token`, checked: ours, unexpired, issued for `binding`."""
        if not isinstance(token, str):
            raise RequestStateError("not a string")
        if len(token) > MAX_TOKEN_CHARS:
            raise RequestStateError("too long")
        version, _, rest = token.partition(".")
        body, _, mac = rest.partition(".")
        if version != VERSION or not _B64URL.fullmatch(body) or not _B64URL.fullmatch(mac):
            raise RequestStateError("malformed")
        # Both sides are ASCII here; compare in constant time before parsing anything.
        if not self._signed(mac, body) and not (self._keys.refresh() and self._signed(mac, body)):
            raise RequestStateError("bad signature")
        state = _state(body)
        if self._clock() >= state.expires_at:
            raise RequestStateError("expired")
        if state.binding != binding:  # not a secret: the client knows its own params
            raise RequestStateError("issued for another request")
        return state

    def _signed(self, mac: str, body: str) -> bool:
        # Every accepted key is tried (at most a few), so the time taken says nothing of which.
        matches = [hmac.compare_digest(mac, _mac(key, body)) for key in self._keys.ring().open]
        return any(matches)


def _mac(key: bytes, body: str) -> str:
    return _b64(hmac.new(key, f"{VERSION}.{body}".encode("ascii"), hashlib.sha256).digest())


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode("ascii").rstrip("=")


def _state(body: str) -> RequestState:
    """Decode an authenticated payload; a shape we never write is still refused, not trusted."""
    try:
        raw = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    except ValueError:  # binascii.Error, UnicodeDecodeError and JSONDecodeError all are
        raise RequestStateError("malformed") from None
    if not isinstance(raw, dict):
        raise RequestStateError("malformed")
    bound, expires, approved = raw.get("b"), raw.get("e"), raw.get("a")
    upstream, parked, asked = raw.get("u"), raw.get("p"), raw.get("q", [])
    if (not isinstance(bound, str) or isinstance(expires, bool) or not isinstance(expires, int | float)
            or not math.isfinite(expires) or not _strings(approved) or not _strings(asked)
            or not isinstance(upstream, str | None) or not isinstance(parked, str | None)):
        raise RequestStateError("malformed")
    assert isinstance(approved, list) and isinstance(asked, list)
    return RequestState(bound, float(expires), tuple(approved), upstream, parked, tuple(asked))


def _strings(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)
