"""Validated, immutable config values. Built only by `config.load`; read everywhere else."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from tfunnel import __version__

META_TOOL_NAMES = (
    "toolfunnel_list_tools",
    "toolfunnel_tool_instructions",
    "toolfunnel_run_tool",
    "toolfunnel_howto",
)
# The management tools (`invoke: {"type": "builtin", "name": ...}`), run in-process by
# `tfunnel.manage` (which defines them; a test keeps the two lists equal).
BUILTIN_TOOL_NAMES = ("tf_list", "tf_tool_add", "tf_tool_set", "tf_tool_update", "tf_mcp_add", "tf_mcp_set",
                      "tf_mcp_discover", "tf_expose", "tf_hook_add", "tf_hook_set", "tf_log", "tf_pack",
                      "tf_settings", "tf_accept_change", "tf_wrap")
# `tools.state.json` keys that are not tool names: the wrap (`passthrough`: the wrapped upstream's
# id) and the id its tools carry in hooks' Claude Code names (`passthroughAs`, `tfunnel wrap --as`).
RESERVED_STATE_KEYS = frozenset({"passthrough", "passthroughAs"})
# State keys (and PreToolUse tool names) of the upstreams' prompts and resources.
PROMPT_PREFIX = "prompt:"
RESOURCE_PREFIX = "resource:"

MIB = 1024 * 1024


@dataclass(frozen=True)
class Limits:
    """Bounds on what one message, one tool run and one shutdown may cost."""

    max_message_bytes: int = 16 * MIB
    tool_timeout_s: float = 60.0
    tool_output_bytes: int = 1 * MIB
    shutdown_grace_s: float = 5.0
    # How long an upstream may take to come up: the gateway's startup wait, and how long a call to
    # a tool of an upstream that is still starting waits for it.
    upstream_start_s: float = 15.0
    # Tool and hook processes running at once, gateway-wide; more calls wait their turn.
    max_tool_processes: int = 32
    # The HTTP service (SPEC §8.2): how long a request body may take to arrive (408 after), how
    # long a connection may sit outside a request (idle between requests, or still sending a
    # request's head) before it is closed, how many requests it handles at once (health and
    # metrics endpoints not counted), and how many sessions it keeps.
    body_read_timeout_s: float = 30.0
    # How long a client may leave what we write to it untaken before it counts as gone.
    write_timeout_s: float = 30.0
    idle_timeout_s: float = 30.0
    max_http_requests: int = 512
    max_sessions: int = 256


# What a management tool asks the user to confirm first (`gate.confirmManagement`).
ConfirmManagement = Literal["loosening", "all", "none"]


@dataclass(frozen=True)
class GateSettings:
    ask_fallback: Literal["deny", "allow"] = "deny"
    confirm_management: ConfirmManagement = "loosening"


# What the first sight of an upstream item holds for approval (`approvals.quarantine`).
Quarantine = Literal["suspicious", "all-new", "off"]
QUARANTINE_MODES: tuple[Quarantine, ...] = ("suspicious", "all-new", "off")


# How `/metrics`, `/health` and `tfunnel tools --tokens` count tokens (`tokens`): with one of the
# two vocabularies `bpe-openai` ships, or by the estimate (`tfunnel.observe.tokens`).
TokenCounter = Literal["o200k_base", "cl100k_base", "estimate"]
TOKEN_COUNTERS: tuple[TokenCounter, ...] = ("o200k_base", "cl100k_base", "estimate")


@dataclass(frozen=True)
class ApprovalSettings:
    quarantine: Quarantine = "suspicious"


SurfaceMode = Literal["lean", "full", "auto"]
SURFACE_MODES: tuple[SurfaceMode, ...] = ("lean", "full", "auto")


@dataclass(frozen=True)
class ProfileMatch:
    """Who a profile is for (`profiles[].match`): every given test must hold. `client_name` is a
    glob over the client's `clientInfo.name` (case-insensitive); `token_subject` a glob over the
    HTTP bearer token's `sub`; `token_scope` a scope the token must carry."""

    client_name: str | None = None
    token_subject: str | None = None
    token_scope: str | None = None


@dataclass(frozen=True)
class Profile:
    """One `toolfunnel.json` `profiles[]` entry: what one kind of client sees and may run.

    `tools`, `upstreams` and `prompts` are allow-lists of globs (None: no restriction): `tools`
    over local tool ids and display names and upstream tools' surfaced names, `upstreams` over
    upstream ids (their tools, prompts and resources), `prompts` over surfaced prompt names.
    `always_load`: tools on the top level in every mode (globs, within what is allowed)."""

    name: str
    match: ProfileMatch | None = None  # None: chosen only by `--profile` (or as the fallback)
    mode: SurfaceMode = "lean"
    tools: tuple[str, ...] | None = None
    upstreams: tuple[str, ...] | None = None
    prompts: tuple[str, ...] | None = None
    always_load: tuple[str, ...] = ()

    @property
    def unrestricted(self) -> bool:
        return self.tools is None and self.upstreams is None and self.prompts is None


@dataclass(frozen=True)
class Settings:
    """`toolfunnel.json`: identity and settings. `raw` keeps unknown fields for writers."""

    server_name: str = "tfunnel"
    server_version: str = __version__
    client_name: str = "tfunnel"
    client_version: str = __version__
    http_port: int = 9998
    ui_port: int = 9777
    serve_legacy: bool = True
    # The longest an upstream's own instructions may be in the server instructions we send (its
    # section's text; all sections together at most 8 times this); 0 leaves the sections out.
    upstream_instructions_max_chars: int = 1000
    tokens: TokenCounter = "cl100k_base"
    requires: tuple[Mapping[str, Any], ...] = ()
    gate: GateSettings = field(default_factory=GateSettings)
    approvals: ApprovalSettings = field(default_factory=ApprovalSettings)
    limits: Limits = field(default_factory=Limits)
    # Per-client surfaces, first match wins; a profile named `default` is the fallback.
    profiles: tuple[Profile, ...] = ()
    # The `requestState` key shared by instances behind one proxy (`home/state_key.py`), as
    # written (relative: against the home); None: a random key per process.
    state_key_file: str | None = None
    raw: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Invoke:
    type: Literal["script", "shell", "builtin"]
    # The script path for "script", the command line for "shell", the management operation's
    # name for "builtin" (run in-process: `tfunnel.manage`).
    target: str


@dataclass(frozen=True)
class ToolEntry:
    """One register entry. `mode` is already inferred (an invoke makes it `gateway`)."""

    id: str
    name: str
    summary: str = ""
    category: str = ""
    instructions: str = ""
    input_schema: Mapping[str, Any] | None = None
    mode: Literal["gateway", "reference"] = "gateway"
    invoke: Invoke | None = None
    timeout_s: float | None = None
    # The ToolFunnel script (`tools/scripts/tf-x.js`) of a management entry served by our built-in
    # instead (`config.adopt`); None for every other entry.
    adopted: str | None = None
    # "examples": argument objects, shown as example calls in its instructions.
    examples: tuple[Mapping[str, Any], ...] = ()


@dataclass(frozen=True)
class Register:
    version: int | float = 1
    description: str = ""
    tools: tuple[ToolEntry, ...] = ()

    def by_id(self) -> dict[str, ToolEntry]:
        return {t.id: t for t in self.tools}


@dataclass(frozen=True)
class Visibility:
    """One `tools.state.json` entry; `None` means "the default for this kind of tool"."""

    enabled: bool | None = None
    hidden: bool | None = None
    hot: bool | None = None


@dataclass(frozen=True)
class ToolState:
    entries: Mapping[str, Visibility] = field(default_factory=dict)
    # The wrapped upstream's id (`tfunnel wrap ID`), or None: no wrap.
    passthrough: str | None = None
    # `tfunnel wrap ID --as NAME`: the server id in hooks' `mcp__<id>__<tool>` names (default ID).
    passthrough_as: str | None = None
