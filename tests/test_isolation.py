"""The isolation guard (SPEC §6.4): path-shaped args, cwd, code-loading env, symlinks, opt-outs."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from tfunnel.config.expose import UpstreamSpec
from tfunnel.upstream.isolation import (
    OPTION_STRING_ENV,
    PATH_LIST_ENV,
    is_inside,
    isolation_problems,
)


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A home with a `sub` folder, beside an `outside` folder; `~` is `outside`."""
    (tmp_path / "home" / "sub").mkdir(parents=True)
    (tmp_path / "outside").mkdir()
    monkeypatch.setenv("HOME", str(tmp_path / "outside"))
    return tmp_path / "home"


def fill(value: str, home: Path) -> str:
    """Replace {home} and {out} placeholders with the test's folders."""
    return value.format(home=home, out=home.parent / "outside")


def spec(**fields: Any) -> UpstreamSpec:
    return UpstreamSpec(**{"id": "u", "command": "node", **fields})


ARGS = [
    pytest.param("server.js", True, id="bare-name"),
    pytest.param("--verbose", True, id="flag"),
    pytest.param("-v", True, id="short-flag"),
    pytest.param("--flag=value", True, id="flag-plain-value"),
    pytest.param(".", True, id="dot"),
    pytest.param("./server.js", True, id="dot-relative"),
    pytest.param("sub/server.js", True, id="relative-with-separator"),
    pytest.param("sub/../server.js", True, id="relative-dotdot-inside"),
    pytest.param("{home}/server.js", True, id="absolute-inside"),
    pytest.param("{home}", True, id="the-home-itself"),
    pytest.param("--root={home}/sub", True, id="flag-value-absolute-inside"),
    pytest.param("--root=sub/x", True, id="flag-value-relative-inside"),
    pytest.param("https://example.com/mcp", True, id="url-judged-relative"),
    pytest.param("..", False, id="dotdot"),
    pytest.param("../outside/x.js", False, id="relative-escaping"),
    pytest.param("sub/../../x.js", False, id="relative-escaping-through-sub"),
    pytest.param("{out}/server.js", False, id="absolute-outside"),
    pytest.param("/", False, id="root"),
    pytest.param("--root={out}", False, id="flag-value-absolute-outside"),
    pytest.param("--root=../outside", False, id="flag-value-relative-outside"),
    pytest.param("--root=~", False, id="flag-value-tilde"),
    pytest.param("~/server.js", False, id="tilde"),
    pytest.param("~", False, id="tilde-alone"),
    pytest.param("{home}/../outside", False, id="absolute-dotdot-escaping"),
]


@pytest.mark.parametrize(("arg", "allowed"), ARGS)
def test_path_shaped_args(home: Path, arg: str, allowed: bool) -> None:
    """Path-shaped args (and `--flag=value` values) must resolve inside the home."""
    value = fill(arg, home)
    problems = isolation_problems(spec(args=("first", value)), home)
    if allowed:
        assert problems == []
    else:
        [problem] = problems
        assert problem.startswith(f"args[1] {value!r}")
        assert "outside the home" in problem and '"allowOutsidePaths": true' in problem


@pytest.mark.parametrize(("arg", "_allowed"), [p for p in ARGS if not p.values[1]])
def test_outside_args_are_allowed_by_the_opt_out(home: Path, arg: str, _allowed: bool) -> None:
    """allowOutsidePaths lets every path-shaped arg through."""
    assert isolation_problems(spec(args=(fill(arg, home),), allow_outside_paths=True), home) == []


def test_problem_names_the_resolved_path(home: Path) -> None:
    """The message shows where a relative value really points."""
    [problem] = isolation_problems(spec(args=("--root=../outside/x",)), home)
    assert f"resolves to {home.parent / 'outside' / 'x'}" in problem
    assert "(its value '../outside/x')" in problem


def test_relative_args_resolve_against_the_cwd(home: Path) -> None:
    """A relative arg is judged from the upstream's cwd, not from the home."""
    assert isolation_problems(spec(cwd="sub", args=("../x.js",)), home) == []
    assert len(isolation_problems(spec(cwd="sub", args=("../../x.js",)), home)) == 1


@pytest.mark.parametrize(
    ("cwd", "allowed"),
    [
        pytest.param(None, True, id="default"),
        pytest.param("sub", True, id="relative-inside"),
        pytest.param("{home}/sub", True, id="absolute-inside"),
        pytest.param("{home}", True, id="the-home"),
        pytest.param("..", False, id="relative-parent"),
        pytest.param("../outside", False, id="relative-outside"),
        pytest.param("{out}", False, id="absolute-outside"),
        pytest.param("~", False, id="tilde"),
    ],
)
def test_cwd(home: Path, cwd: str | None, allowed: bool) -> None:
    """The resolved cwd must be inside the home unless allowOutsidePaths."""
    value = None if cwd is None else fill(cwd, home)
    problems = isolation_problems(spec(cwd=value), home)
    if allowed:
        assert problems == []
    else:
        [problem] = problems
        assert problem.startswith(f"cwd {value!r} resolves to ") and "allowOutsidePaths" in problem
        assert isolation_problems(spec(cwd=value, allow_outside_paths=True), home) == []


@pytest.mark.parametrize("name", sorted(OPTION_STRING_ENV))
def test_option_string_env_is_refused_whenever_set(home: Path, name: str) -> None:
    """NODE_OPTIONS and its kin are refused even with an innocent value, unless allowCodeLoadingEnv."""
    [problem] = isolation_problems(spec(env={name: "--max-old-space-size=64"}), home)
    assert problem.startswith(f"env {name} is set") and '"allowCodeLoadingEnv": true' in problem
    assert "max-old-space" not in problem  # the value may be a secret: never repeated
    assert isolation_problems(spec(env={name: "x"}, allow_code_loading_env=True), home) == []
    assert len(isolation_problems(spec(env={name: "x"}, allow_outside_paths=True), home)) == 1


@pytest.mark.parametrize("value", ["", "  "], ids=["empty", "blank"])
def test_option_string_env_empty_is_allowed(home: Path, value: str) -> None:
    """An empty option-string variable loads nothing."""
    assert isolation_problems(spec(env={"NODE_OPTIONS": value}), home) == []


def test_env_names_match_case_insensitively(home: Path) -> None:
    """`node_options` and `PythonPath` are judged like their upper-case names."""
    out = str(home.parent / "outside")
    assert len(isolation_problems(spec(env={"node_options": "-r x", "PythonPath": out}), home)) == 2


@pytest.mark.parametrize("name", sorted(PATH_LIST_ENV))
def test_path_list_env(home: Path, name: str) -> None:
    """Each path-list variable must name places inside the home, unless allowOutsidePaths."""
    inside, outside = str(home / "sub" / "lib.so"), str(home.parent / "outside" / "lib.so")
    assert isolation_problems(spec(env={name: inside}), home) == []
    [problem] = isolation_problems(spec(env={name: outside}), home)
    assert problem.startswith(f"env {name} element {outside!r} resolves to ")
    assert "allowOutsidePaths" in problem
    assert isolation_problems(spec(env={name: outside}, allow_outside_paths=True), home) == []
    # allowCodeLoadingEnv is for the option-string class only.
    assert len(isolation_problems(spec(env={name: outside}, allow_code_loading_env=True), home)) == 1


def test_path_list_elements_are_judged_one_by_one(home: Path) -> None:
    """Only the outside element of a list is refused; empty elements are skipped; relative is from cwd."""
    out = home.parent / "outside"
    value = os.pathsep.join(["sub", "", str(out), str(home), "../outside/lib"])
    problems = isolation_problems(spec(env={"PYTHONPATH": value}), home)
    assert [p.split(" resolves")[0] for p in problems] == [
        f"env PYTHONPATH element {str(out)!r}", "env PYTHONPATH element '../outside/lib'"]


def test_preload_lists_split_on_spaces_and_refuse_bare_names(home: Path) -> None:
    """LD_PRELOAD is split on spaces too; a bare library name is searched outside the home."""
    out = home.parent / "outside"
    value = f"{home}/a.so {out}/b.so{os.pathsep}libc.so.6"
    problems = isolation_problems(spec(env={"LD_PRELOAD": value}), home)
    assert len(problems) == 2
    assert f"{str(out / 'b.so')!r}" in problems[0]
    assert "'libc.so.6'" in problems[1] and "system library path" in problems[1]


@pytest.mark.parametrize(
    "fields",
    [
        pytest.param({"command": "/usr/bin/node"}, id="command-absolute-outside"),
        pytest.param({"command": "../node"}, id="command-relative-outside"),
        pytest.param({"env": {"PATH": "/usr/bin:/bin"}}, id="PATH"),
        pytest.param({"env": {"DATA_DIR": "/etc"}}, id="unrelated-env"),
        pytest.param({"transport": "http", "url": "http://h/", "cwd": "/", "args": ("/etc",),
                      "env": {"NODE_OPTIONS": "-r x"}}, id="http-not-checked"),
        pytest.param({"transport": "websocket", "url": "ws://h/", "args": ("/etc",)}, id="ws-not-checked"),
    ],
)
def test_never_checked(home: Path, fields: dict[str, Any]) -> None:
    """command, PATH, other env vars and remote upstreams are not guarded."""
    assert isolation_problems(spec(**fields), home) == []


def test_inherited_environment_is_not_judged(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the env written in the spec counts, not the gateway's own environment."""
    monkeypatch.setenv("NODE_OPTIONS", "-r /evil.js")
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    assert isolation_problems(spec(), home) == []


def test_every_refusal_is_reported(home: Path) -> None:
    """A spec with several outside values gets one problem each."""
    out = str(home.parent / "outside")
    problems = isolation_problems(
        spec(cwd=out, args=("ok", f"{home}/x", out), env={"NODE_OPTIONS": "-r x", "NODE_PATH": out}), home)
    assert [p.split(" ")[0] for p in problems] == ["cwd", "args[2]", "env", "env"]


def test_symlink_escaping_the_home_is_refused(home: Path) -> None:
    """A link inside the home that points outside counts as outside, for args, cwd and env."""
    (home / "link").symlink_to(home.parent / "outside", target_is_directory=True)
    assert len(isolation_problems(spec(args=("link/server.js",)), home)) == 1
    assert len(isolation_problems(spec(args=(f"{home}/link",)), home)) == 1
    assert len(isolation_problems(spec(cwd="link"), home)) == 1
    assert len(isolation_problems(spec(env={"PYTHONPATH": "link"}), home)) == 1


def test_symlinked_home_is_followed(home: Path) -> None:
    """A home reached through a symlink still contains its own paths, by either spelling."""
    alias = home.parent / "alias"
    alias.symlink_to(home, target_is_directory=True)
    assert isolation_problems(spec(args=(f"{home}/x.js", f"{alias}/y.js"), cwd="sub"), alias) == []


@pytest.mark.parametrize(
    ("path", "base", "inside"),
    [
        pytest.param("x", "{home}", True, id="relative"),
        pytest.param("{home}", "{out}", True, id="the-home"),
        pytest.param("{home}sibling", "{home}", False, id="prefix-sibling"),
        pytest.param("../x", "{home}/sub", True, id="relative-from-base"),
        pytest.param("../x", "{home}", False, id="relative-out"),
        pytest.param("{out}/x", "{home}", False, id="absolute-out"),
        pytest.param("~/x", "{home}", False, id="tilde"),
    ],
)
def test_is_inside(home: Path, path: str, base: str, inside: bool) -> None:
    """is_inside: `~` expanded, relative against base, realpath, home itself counts as inside."""
    assert is_inside(fill(path, home), home, Path(fill(base, home))) is inside
