"""`tfunnel pack` (later `tf_pack`): a portable copy of a home, or a pip-installable project that
serves it. `pack(home, options)` validates, walks the home (the verdicts are
`manage/pack_plan.decide`'s), and writes every file atomically; `pack_command` is the CLI face.

Formats: `home` writes the copy to `out`; `python` writes a project to `out` (pyproject.toml, a
README stub, the package with the copy in `<pkg>/home/`, see `manage/pack_project.py`). The copy's
`toolfunnel.json` has `serverName` and `serverVersion` stamped. `out` defaults to
`<home>/dist/<name>`; a non-empty `out` is refused unless `force` (then files are overwritten and
other files kept).

Exit status of the command: 0 written, 1 refused (the message names the argument), or the home's
`toolfunnel.json` is invalid.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tfunnel.config.atomic import write_atomic, write_json_atomic
from tfunnel.config.load import SETTINGS_FILE, load_settings
from tfunnel.config.validate import read_json
from tfunnel.errors import BadArgument
from tfunnel.home.state_key import PREVIOUS_SUFFIX
from tfunnel.home.state_key import resolve as resolve_key
from tfunnel.manage import pack_project
from tfunnel.manage.pack_plan import (
    DEFAULT_VERSION,
    ROOTS,
    Kind,
    Verdict,
    check_description,
    check_format,
    check_name,
    check_package,
    check_version,
    copied_target,
    decide,
    destination_problem,
    package_name,
    sanitize_name,
)
from tfunnel.observe.audit import AuditLog


@dataclass(frozen=True)
class PackOptions:
    format: str = "home"
    name: str | None = None
    version: str | None = None
    description: str | None = None
    out: str | None = None
    force: bool = False
    approvals: bool = False


@dataclass(frozen=True)
class PackResult:
    format: str
    out: Path
    files: int
    next: list[str]
    warnings: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"ok": True, "format": self.format, "out": str(self.out), "files": self.files,
                "next": self.next, "warnings": self.warnings}


def pack(home: Path, options: PackOptions) -> PackResult:
    """Write the pack `options` describe; raise `BadArgument` naming the argument that is refused
    (`home` for a file of the home that cannot be read), and `ConfigError` when the home's
    toolfunnel.json is invalid."""
    home = home.resolve()
    fmt = check_format(options.format)
    settings = load_settings(home)  # refuses an invalid toolfunnel.json with its problems
    raw = _raw_settings(home)
    name = check_name(sanitize_name(options.name or _text(raw.get("serverName"))), fmt)
    version = check_version(options.version or _text(raw.get("serverVersion")) or DEFAULT_VERSION, fmt)
    description = check_description(options.description or f"{name}: MCP tools served by tfunnel")
    out = Path(options.out).expanduser() if options.out else home / "dist" / name
    out = out.resolve()
    project = pack_project.Project(name, check_package(package_name(name), fmt), version, description)
    copy_root = out / project.package / pack_project.PACKAGE_HOME if fmt == "python" else out
    problem = destination_problem(home, out, copy_root)
    if problem:
        raise BadArgument("out", f"refused: {problem}")
    if out.exists() and not out.is_dir():
        raise BadArgument("out", f"{out} exists and is not a folder")
    if out.is_dir() and any(out.iterdir()) and not options.force:
        raise BadArgument("out", f"{out} is not empty; pass --force (force) to overwrite its files "
                          "(others are kept)")
    files, warnings = _walk(home, options.approvals, _secrets(home, settings.state_key_file))
    try:
        written = _write(raw, files, project, out, copy_root, fmt)
    except OSError as exc:
        raise BadArgument("out", f"cannot write {exc.filename or out}: {exc.strerror or exc}") from exc
    if fmt == "python":
        hints = [f"pip install {out}", f"{name}    # serves stdio", f"{name} serve --http",
                 f"pip wheel --no-deps -w {out / 'dist'} {out}    # a wheel to hand over"]
    else:
        hints = [f"tfunnel --home {out} check", f"tfunnel --home {out} serve"]
    AuditLog(home).record("config", via="cli", file=str(out), change=f"pack {fmt}")
    return PackResult(fmt, out, written, hints, warnings)


def _write(raw: dict[str, Any], files: list[tuple[tuple[str, ...], Path]], project: pack_project.Project,
           out: Path, copy_root: Path, fmt: str) -> int:
    """Write the copy (and, for python, the project around it); return how many files."""
    for rel, src in files:
        _copy(src, copy_root.joinpath(*rel))
    write_json_atomic(copy_root / SETTINGS_FILE,
                      {**raw, "serverName": project.name, "serverVersion": project.version})
    written = len(files) + (not any(rel == (SETTINGS_FILE,) for rel, _ in files))
    if fmt == "python":
        generated = {
            out / "pyproject.toml": pack_project.pyproject(project),
            out / "README.md": pack_project.readme(project),
            out / project.package / "__init__.py": pack_project.init_py(project),
            out / project.package / "__main__.py": pack_project.main_py(project),
        }
        for path, text in generated.items():
            write_atomic(path, text.encode())
        written += len(generated)
    return written


def _raw_settings(home: Path) -> dict[str, Any]:
    path = home / SETTINGS_FILE
    if not path.exists():
        return {}
    raw = read_json(path, SETTINGS_FILE)  # load_settings has accepted it: a JSON object
    return dict(raw) if isinstance(raw, dict) else {}


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value.strip() else None


def _secrets(home: Path, state_key_file: str | None) -> frozenset[Path]:
    """The files no copy may hold wherever they lie: the requestState key instances share, and
    its rotated-out predecessor (a copy seals with a key of its own, made at its first start)."""
    if state_key_file is None:
        return frozenset()
    key = resolve_key(home, state_key_file).resolve()
    return frozenset({key, key.with_name(key.name + PREVIOUS_SUFFIX)})


def _walk(home: Path, approvals: bool, secrets: frozenset[Path] = frozenset(),
          ) -> tuple[list[tuple[tuple[str, ...], Path]], list[str]]:
    """The files to copy (home-relative parts, source path) and the warnings of what was left out."""
    files: list[tuple[tuple[str, ...], Path]] = []
    warnings: list[str] = []
    seen_dirs: set[Path] = set()

    def visit(parts: tuple[str, ...], path: Path) -> None:
        try:
            kind, size, real = _kind(home, path, approvals)
        except OSError as exc:
            raise BadArgument("home", f"cannot read {path}: {exc.strerror or exc}") from exc
        verdict = decide(parts, kind, size, approvals=approvals)
        rel = "/".join(parts)
        if verdict.action == "take" and real in secrets:
            verdict = Verdict("warn", "the requestState key of toolfunnel.json stateKeyFile, a secret of "
                              "this deployment; not copied")
        if verdict.action == "warn":
            warnings.append(f"{rel}: {verdict.reason}")
        if verdict.action != "take":
            return
        if kind == "file":
            files.append((parts, path))
            return
        if real in seen_dirs:
            warnings.append(f"{rel}: a symlink back into a folder already copied; not copied again")
            return
        seen_dirs.add(real)
        try:
            children = sorted(path.iterdir(), key=lambda p: p.name)
        except OSError as exc:
            raise BadArgument("home", f"cannot read {path}: {exc.strerror or exc}") from exc
        for child in children:
            visit((*parts, child.name), child)

    for root in ROOTS:
        if os.path.lexists(home / root):
            visit((root,), home / root)
    return files, warnings


def _kind(home: Path, path: Path, approvals: bool) -> tuple[Kind, int, Path]:
    """What `path` is, following a symlink only while it stays inside what a copy takes."""
    real = path.resolve()
    if path.is_symlink():
        if not real.exists():
            return "broken-link", 0, real
        if not real.is_relative_to(home):
            return "outside-link", 0, real
        if not copied_target(real.relative_to(home).parts, approvals=approvals):
            return "excluded-link", 0, real
    st = real.stat()
    if stat.S_ISDIR(st.st_mode):
        return "dir", 0, real
    if stat.S_ISREG(st.st_mode):
        return "file", st.st_size, real
    return "special", 0, real


def _copy(src: Path, dest: Path) -> None:
    try:
        data = src.read_bytes()
    except OSError as exc:
        raise BadArgument("home", f"cannot read {src}: {exc.strerror or exc}") from exc
    write_atomic(dest, data)
    os.chmod(dest, src.stat().st_mode & 0o777)  # keeps scripts executable


def pack_command(home: Path, options: PackOptions, *, as_json: bool = False) -> int:
    """`tfunnel pack`: print the result (JSON with `as_json`), or the refusal on stderr."""
    try:
        result = pack(home, options)
    except BadArgument as exc:
        print(f"tfunnel pack: {exc}", file=sys.stderr)
        return 1
    for warning in result.warnings:
        print(f"tfunnel pack: warning: {warning}", file=sys.stderr)
    if as_json:
        print(json.dumps(result.as_dict(), indent=2))
        return 0
    print(f"packed {result.files} file(s) as {result.format} into {result.out}")
    print("next:")
    for hint in result.next:
        print(f"  {hint}")
    return 0
