"""The isolation guard (SPEC §6.4): the values that decide what code a stdio upstream runs stay
inside the home unless the upstream opts out.

This is a **tripwire, not a sandbox**. It catches a config that reaches outside an auditable home
(an arg naming `/opt/x/server.js`, a `cwd` elsewhere, an `LD_PRELOAD` of a foreign library, a
`NODE_OPTIONS=--require ...`). It does not confine the child: `command` (the interpreter) and
`PATH` are deliberately not guarded, a server may open any file it likes once running, and an arg
that is not path-shaped (`-I/usr/include` is judged as a relative name) slips through. Only the
`env` written in the upstream's spec is judged, not the gateway's inherited environment.

Checked, for stdio upstreams only:
- path-shaped args — absolute, containing a path separator, `~`-prefixed, or `.`/`..`; for
  `--flag=value` the value after the first `=` too — must resolve (realpath, relative ones against
  the upstream's resolved cwd) inside the home; opt-out `allowOutsidePaths`;
- the resolved `cwd` must be inside the home; opt-out `allowOutsidePaths`;
- option-string env vars (`NODE_OPTIONS`, `JAVA_TOOL_OPTIONS`, ...) are refused whenever set;
  opt-out `allowCodeLoadingEnv`;
- path-list env vars (`PYTHONPATH`, `LD_PRELOAD`, ...): each element (split on `os.pathsep`, and on
  whitespace for the preload lists) must be inside the home; opt-out `allowOutsidePaths`. A bare
  library name in a preload list is searched on the system library path, so it counts as outside.

Env names are matched case-insensitively (conservative: `node_options` is refused too).
`isolation_problems` is pure apart from reading symlinks; a non-empty answer is a permanent failure
for the supervisor (§6.2). Messages do not name the upstream: callers prefix its id.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from tfunnel.config.expose import UpstreamSpec

# Values that are code or options by themselves: refused whenever set, unless allowCodeLoadingEnv.
OPTION_STRING_ENV = frozenset({
    "NODE_OPTIONS", "JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS", "JDK_JAVA_OPTIONS", "PERL5OPT", "RUBYOPT",
})
# Values that list files or folders code is loaded from: each element must be inside the home.
PATH_LIST_ENV = frozenset({
    "PYTHONPATH", "PYTHONSTARTUP", "PYTHONHOME", "PYTHONEXECUTABLE",
    "NODE_PATH", "NODE_REPL_EXTERNAL_MODULE",
    "LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT",
    "DYLD_INSERT_LIBRARIES", "DYLD_LIBRARY_PATH", "DYLD_FRAMEWORK_PATH",
    "PERL5LIB", "PERLLIB", "RUBYLIB", "GEM_PATH", "CLASSPATH",
    "BASH_ENV", "ENV", "DOTNET_STARTUP_HOOKS", "CORECLR_PROFILER_PATH",
})
# The dynamic loader searches its library path for an element without a slash.
PRELOAD_ENV = frozenset({"LD_PRELOAD", "LD_AUDIT", "DYLD_INSERT_LIBRARIES"})

_OUTSIDE = 'set "allowOutsidePaths": true on the upstream to allow it'
_CODE_ENV = 'set "allowCodeLoadingEnv": true on the upstream to allow it'


def isolation_problems(spec: UpstreamSpec, home: Path) -> list[str]:
    """One problem per refused value (naming it, its resolved path and the opt-out); [] if allowed."""
    if spec.transport != "stdio":
        return []
    problems: list[str] = []
    root = os.path.realpath(home)
    cwd = spec.resolved_cwd(home)
    if not spec.allow_outside_paths:
        if not is_inside(str(cwd), home, home):
            problems.append(f"cwd {spec.cwd!r} resolves to {_resolve(str(cwd), home)}, outside the home "
                            f"{root}; {_OUTSIDE}")
        for index, arg in enumerate(spec.args):
            for candidate in _path_candidates(arg):
                if not is_inside(candidate, home, cwd):
                    shown = "" if candidate == arg else f" (its value {candidate!r})"
                    problems.append(f"args[{index}] {arg!r}{shown} resolves to {_resolve(candidate, cwd)}, "
                                    f"outside the home {root}; {_OUTSIDE}")
                    break
    for name, value in spec.env.items():
        key = name.upper()
        if key in OPTION_STRING_ENV and value.strip() and not spec.allow_code_loading_env:
            # The value is not repeated: this text reaches /health and clients, and an option
            # string may carry a secret.
            problems.append(f"env {name} is set; it makes the child load code or options "
                            f"from outside its command line; {_CODE_ENV}")
        elif key in PATH_LIST_ENV and not spec.allow_outside_paths:
            problems.extend(_path_list_problems(name, key, value, home, cwd, root))
    return problems


def is_inside(path: str, home: Path, base: Path) -> bool:
    """True when `path` (`~` expanded; relative ones against `base`), with every symlink resolved,
    is the home or lies under it (the home's own symlinks resolved too)."""
    root = os.path.realpath(home)
    full = _resolve(path, base)
    return full == root or full.startswith(root.rstrip(os.sep) + os.sep)


def _resolve(path: str, base: Path) -> str:
    return os.path.realpath(os.path.join(base, os.path.expanduser(path)))


def _looks_like_path(value: str) -> bool:
    return (
        os.path.isabs(value)
        or os.sep in value
        or (os.altsep is not None and os.altsep in value)
        or value.startswith("~")
        or value in (".", "..")
    )


def _path_candidates(arg: str) -> Iterator[str]:
    """The path-shaped readings of one arg: the token, and the value after `=` in `--flag=value`."""
    if _looks_like_path(arg):
        yield arg
    if "=" in arg:
        value = arg.split("=", 1)[1]
        if value and _looks_like_path(value):
            yield value


def _path_list_problems(name: str, key: str, value: str, home: Path, cwd: Path, root: str) -> list[str]:
    elements = value.split(os.pathsep)
    if key in PRELOAD_ENV:
        elements = [piece for element in elements for piece in element.split()]
    problems: list[str] = []
    for element in elements:
        if not element:
            continue  # an empty element means the cwd, which is guarded on its own
        if key in PRELOAD_ENV and not _looks_like_path(element):
            problems.append(f"env {name} names the library {element!r}, which the loader searches on the "
                            f"system library path, outside the home {root}; {_OUTSIDE}")
        elif not is_inside(element, home, cwd):
            problems.append(f"env {name} element {element!r} resolves to {_resolve(element, cwd)}, "
                            f"outside the home {root}; {_OUTSIDE}")
    return problems


def suspended_by_wrap(spec: UpstreamSpec, home: Path) -> list[str]:
    """What the guard would refuse of `spec` (as `isolation_problems`, without the opt-out
    advice): what a wrap, which suspends the guard for its upstream, lets through. [] if nothing."""
    advice = (f"; {_OUTSIDE}", f"; {_CODE_ENV}")
    return [next((p.removesuffix(a) for a in advice if p.endswith(a)), p)
            for p in isolation_problems(spec, home)]
