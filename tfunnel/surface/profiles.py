"""Which profile a client gets, and what a profile lets it see and run (pure).

The route layer calls `choose` for every request (cheap, cached) with the settings in force.
`Catalog.view` applies the choice; every listing and every call
path reads visibility through it, so a tool a profile leaves out is absent and refused alike, the
same rule as `enabled: false`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from functools import lru_cache

from tfunnel.config.model import Profile, ProfileMatch
from tfunnel.config.profiles import DEFAULT_PROFILE

BUILTIN_DEFAULT = Profile(DEFAULT_PROFILE)
# Clients that search a long tool list themselves (`mode: auto` gives them every tool top-level),
# by `clientInfo.name`, lower-cased: Claude Code, VS Code, the Copilot clients.
NATIVE_SEARCH_CLIENTS = ("claude-code*", "claude code*", "visual studio code*", "vscode*", "*copilot*")


@dataclass(frozen=True)
class Who:
    """What a request says about its client: `clientInfo.name`, and the bearer token's subject
    and scopes when authentication is on."""

    client_name: str = ""
    subject: str | None = None
    scopes: frozenset[str] = field(default_factory=frozenset)


@dataclass(frozen=True)
class Chosen:
    """A profile as it applies to one client: `full` is its mode with `auto` resolved; `why` says
    what chose it (a match field, `--profile`, or the fallback)."""

    profile: Profile
    full: bool = False
    why: str = "default"

    @property
    def name(self) -> str:
        return self.profile.name

    @property
    def neutral(self) -> bool:
        """It changes nothing: no restriction, lean, nothing always loaded."""
        return self.profile.unrestricted and not self.full and not self.profile.always_load


UNRESTRICTED = Chosen(BUILTIN_DEFAULT)


def native_search(client_name: str) -> bool:
    name = client_name.lower()
    return any(fnmatchcase(name, pattern) for pattern in NATIVE_SEARCH_CLIENTS)


def matched(match: ProfileMatch, who: Who) -> str | None:
    """The field that made `match` hold for `who` (the first given), or None when any given
    test fails."""
    given = [(key, glob) for key, glob in (("clientName", match.client_name),
                                          ("tokenSubject", match.token_subject),
                                          ("tokenScope", match.token_scope)) if glob is not None]
    if not given or not all(_holds(key, glob, who) for key, glob in given):
        return None
    return given[0][0]


def _holds(key: str, glob: str, who: Who) -> bool:
    if key == "clientName":
        return fnmatchcase(who.client_name.lower(), glob.lower())
    if key == "tokenSubject":
        return who.subject is not None and fnmatchcase(who.subject, glob)
    return glob in who.scopes


def choose(profiles: Sequence[Profile], who: Who, forced: str | None = None) -> Chosen:
    """The profile for `who`: the one `--profile` forced (by name; one that is not defined allows
    nothing), else the first whose `match` holds (those that test the token before those that do
    not), else the one named `default`, else the built-in default (everything, lean)."""
    return _choose(tuple(profiles), who, forced)


@lru_cache(maxsize=256)
def _choose(profiles: tuple[Profile, ...], who: Who, forced: str | None) -> Chosen:
    by_name = {p.name: p for p in profiles}
    profile, why = BUILTIN_DEFAULT, "default"
    if forced is not None:
        # A forced profile that is gone (edited out while serving) shows nothing but the
        # meta-tools: never more than the operator chose.
        profile, why = by_name.get(forced, Profile(forced, tools=(), upstreams=(), prompts=())), "--profile"
    else:
        # What the token says is proven; a client's name is its own claim: profiles that test
        # the token are tried first, so a chosen clientInfo.name never overrides them.
        for candidate in sorted(profiles, key=lambda p: not _tests_token(p)):
            reason = matched(candidate.match, who) if candidate.match is not None else None
            if reason is not None:
                profile, why = candidate, reason
                break
        else:
            profile = by_name.get(DEFAULT_PROFILE, BUILTIN_DEFAULT)
    full = profile.mode == "full" or (profile.mode == "auto" and native_search(who.client_name))
    return Chosen(profile, full, why)


def _tests_token(profile: Profile) -> bool:
    match = profile.match
    return match is not None and (match.token_subject is not None or match.token_scope is not None)


def _any(globs: Iterable[str], names: Iterable[str]) -> bool:
    names = tuple(names)
    return any(fnmatchcase(name, glob) for glob in globs for name in names)


def allows_tool(profile: Profile, names: Sequence[str], upstream: str | None, *,
                management: bool = False) -> bool:
    """A tool known by `names` (a local tool's id and display name; an upstream tool's surfaced
    name), of `upstream` (None: a local tool) is in `profile`. A management tool (`tf_*`: it
    reads and changes the whole gateway) is in a restricted profile only when `tools` names it."""
    if upstream is not None and profile.upstreams is not None and not _any(profile.upstreams, (upstream,)):
        return False
    if management and not profile.unrestricted:
        return profile.tools is not None and _any(profile.tools, names)
    return profile.tools is None or _any(profile.tools, names)


def allows_prompt(profile: Profile, name: str, upstream: str) -> bool:
    if profile.upstreams is not None and not _any(profile.upstreams, (upstream,)):
        return False
    return profile.prompts is None or _any(profile.prompts, (name,))


def allows_upstream(profile: Profile, upstream: str) -> bool:
    """`upstream`'s tools, prompts and resources may be in `profile` (each still by its list)."""
    return profile.upstreams is None or _any(profile.upstreams, (upstream,))


def allows_resource(profile: Profile, upstream: str) -> bool:
    return allows_upstream(profile, upstream)


def always_loaded(profile: Profile, names: Sequence[str]) -> bool:
    return _any(profile.always_load, names)
