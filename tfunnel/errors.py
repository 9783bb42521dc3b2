"""The one error tree of tfunnel.

Every failure a component reports is a `TfunnelError`. Boundaries translate it exactly once:
the router turns tool-level failures into an `isError` result (`ToolFailure`), the transport
turns `ProtocolError` into a JSON-RPC error object, and the CLI turns `ConfigError` into a
message and exit status 1.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

# A note is for knowing (a rule tfunnel applied on purpose); it fails nothing, `tfunnel check` included.
Severity = Literal["error", "warning", "note"]


class TfunnelError(Exception):
    """Root of every error tfunnel raises on purpose."""


@dataclass(frozen=True)
class ConfigProblem:
    """One problem in one config file, naming the entry (id or index) and the field.

    An `error` makes the file unusable (start refused, reload refused); a `warning` (an unknown
    field) is reported by `tfunnel check`, the serve log and `/health`, and the file still loads;
    a `note` is reported by `tfunnel check` and the serve log, and fails nothing."""

    file: str
    message: str
    entry: str | None = None
    field: str | None = None
    severity: Severity = "error"

    def __str__(self) -> str:
        where = self.file
        if self.entry is not None:
            where += f": {self.entry}"
        if self.field is not None:
            where += f": field {self.field!r}"
        return f"{where}: {self.message}"


class ConfigError(TfunnelError):
    """A config file is invalid; carries every problem found, not just the first."""

    def __init__(self, problems: list[ConfigProblem]) -> None:
        self.problems = problems
        super().__init__("; ".join(str(p) for p in problems))


class ProtocolError(TfunnelError):
    """A request that gets a JSON-RPC error response (code, message, optional data)."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data


class ToolFailure(TfunnelError):
    """A tool call that fails as a result (`isError: true`), not as a protocol error.

    Unknown or disabled tools reached through a meta-tool, invalid arguments, scripts that
    cannot be started: the message names what is wrong and what is allowed.
    """


class GateDenied(ToolFailure):
    """PreToolUse refused the call; the tool's execute path was never entered."""

    def __init__(self, reason: str, *, internal: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.internal = internal


class UpstreamError(ToolFailure):
    """An upstream could not answer: not ready, timed out, crashed, or refused the request.

    Messages name the upstream and never carry its stderr (which may hold secrets)."""


class UpstreamRemoteError(UpstreamError):
    """The upstream answered a request with a JSON-RPC error (`code`, `data` kept)."""

    def __init__(self, message: str, *, code: int, remote_message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.remote_message = remote_message
        self.data = data


class UpstreamUnavailable(UpstreamError):
    """The upstream is not ready (starting, backing off, stopped or disabled)."""


class UpstreamTimeout(UpstreamError):
    """The upstream did not answer within its control or payload window."""


class UpstreamCrashed(UpstreamError):
    """The upstream's process died (or closed its output) with the request in flight."""


class UpstreamBadAnswer(UpstreamError):
    """The upstream answered the request with a line that is not a valid answer (not JSON,
    nested too deeply, `result` not an object, ...); the line itself is never in the message."""


class BadArgument(TfunnelError):
    """A command's argument is refused (`tfunnel pack`, later its `tf_*` tool): the message names
    the argument and says what is allowed."""

    def __init__(self, argument: str, message: str) -> None:
        super().__init__(f"{argument}: {message}")
        self.argument = argument
        self.message = message
