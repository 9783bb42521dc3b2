"""`toolfunnel.json` `profiles`: per-client surfaces, validated whole (the format; choosing one
for a client is `surface.profiles`).

    "profiles": [
      {"name": "editor", "match": {"clientName": "visual studio code*"}, "mode": "full"},
      {"name": "ops", "match": {"tokenScope": "mcp:ops"}, "upstreams": ["time"], "tools": ["time_*"]},
      {"name": "default", "mode": "lean"}
    ]

A profile narrows what a client may see and run, so a typo must not widen it: an unknown field
is a problem, not a warning, and so is a malformed list.
"""

from __future__ import annotations

import re
from typing import Any

from tfunnel.config.model import SURFACE_MODES, Profile, ProfileMatch, SurfaceMode
from tfunnel.config.validate import Fields, _show

PROFILE_KEYS = ("name", "match", "mode", "tools", "upstreams", "prompts", "alwaysLoad")
MATCH_KEYS = ("clientName", "tokenSubject", "tokenScope")
# A profile's name labels metrics and the audit log: short, and plain.
PROFILE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
DEFAULT_PROFILE = "default"


def parse_profiles(raw: dict[str, Any], f: Fields) -> tuple[Profile, ...]:
    """`raw["profiles"]`, every problem recorded in `f` (a bad entry is left out)."""
    profiles: list[Profile] = []
    seen: set[str] = set()
    for index, item in enumerate(f.array(raw, "profiles", "profile objects")):
        label = f"profiles[{index}]"
        if not isinstance(item, dict):
            f.problem(f"must be an object, got {_show(item)}", label)
            continue
        name = item.get("name")
        if isinstance(name, str) and name:
            label = f"profiles[{index}] ({name!r})"
        profile = _profile(item, label, f)
        if profile is None:
            continue
        if profile.name in seen:
            f.problem("names a profile already defined above; profile names must be unique", label, "name")
            continue
        seen.add(profile.name)
        profiles.append(profile)
    return tuple(profiles)


def _profile(item: dict[str, Any], label: str, f: Fields) -> Profile | None:
    before = len(f.problems)
    f.known(item, label, PROFILE_KEYS, strict=True)
    name = f.string(item, "name", label, required=True, non_empty=True)
    if name and not PROFILE_NAME.fullmatch(name):
        f.problem(f"must be 1 to 64 letters, digits, '_', '.' or '-' (starting with a letter or digit), "
                  f"got {_show(name)}", label, "name")
    match = _match(item, label, f)
    mode = f.choice(item, "mode", label, SURFACE_MODES, "lean")
    tools = _globs(item, "tools", label, f)
    upstreams = _globs(item, "upstreams", label, f)
    prompts = _globs(item, "prompts", label, f)
    always = _globs(item, "alwaysLoad", label, f)
    if len(f.problems) > before:
        return None
    chosen: SurfaceMode = next(m for m in SURFACE_MODES if m == mode)
    return Profile(name, match, chosen, tools, upstreams, prompts, always or ())


def _match(item: dict[str, Any], label: str, f: Fields) -> ProfileMatch | None:
    if "match" not in item:
        return None
    raw = f.mapping(item, "match", label)
    f.known(raw, label, MATCH_KEYS, prefix="match.", strict=True)
    values = {key: f.string(raw, key, label, non_empty=True, field=f"match.{key}") or None
              for key in MATCH_KEYS}
    if not any(values.values()):
        f.problem("must give at least one of " + ", ".join(MATCH_KEYS) + " (leave `match` out for a "
                  "profile chosen only by --profile)", label, "match")
        return None
    return ProfileMatch(values["clientName"], values["tokenSubject"], values["tokenScope"])


def _globs(item: dict[str, Any], key: str, label: str, f: Fields) -> tuple[str, ...] | None:
    """A list of non-empty glob strings; None when the field is absent (no restriction)."""
    if key not in item:
        return None
    values = f.array(item, key, "non-empty strings (glob patterns)", label)
    bad = [v for v in values if not isinstance(v, str) or not v]
    if bad or not isinstance(item[key], list):
        if bad:
            f.problem(f"must hold only non-empty strings (glob patterns), got {_show(bad[0])}", label, key)
        return None
    return tuple(values)
