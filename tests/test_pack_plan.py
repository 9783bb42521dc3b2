"""`tfunnel pack`'s pure decisions: names, versions, destinations, which entries are copied."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tfunnel.errors import BadArgument
from tfunnel.manage.pack_plan import (
    MAX_FILE_BYTES,
    PEP440,
    Kind,
    check_description,
    check_format,
    check_name,
    check_package,
    check_version,
    copied_target,
    decide,
    destination_problem,
    is_pep440,
    package_name,
    sanitize_name,
)


@pytest.mark.parametrize(("raw", "name"), [
    ("My Tools", "my-tools"),
    ("my_server.v2", "my_server.v2"),
    ("  --Weird!!Name__  ", "weird-name"),
    ("a/b\\c:d", "a-b-c-d"),
    ("...", "my-mcp"),
    ("", "my-mcp"),
    (None, "my-mcp"),
    ("Ünïcode ☃ tools", "n-code-tools"),
    ("-._x._-", "x"),
])
def test_sanitize_name(raw: str | None, name: str) -> None:
    assert sanitize_name(raw) == name


@pytest.mark.parametrize(("name", "package"), [
    ("my-tools", "my_tools"),
    ("a.b-c", "a_b_c"),
    ("9lives", "mcp_9lives"),
    ("import", "import_"),
    ("x--y", "x_y"),
])
def test_package_name_is_an_identifier(name: str, package: str) -> None:
    assert package_name(name) == package
    assert package.isidentifier()


@pytest.mark.parametrize(("version", "valid"), [
    ("0.1.0", True), ("1", True), ("1.2.3rc1", True), ("1.0.post2", True), ("1.0.dev3", True),
    ("2!1.0", True), ("1.0+local.7", True), ("v1.0", True),
    ("1.0-gamma", False), (" 1.0", False), ("latest", False), ("1..0", False), ("1.0 beta", False),
    ("", False),
])
def test_pep440_with_packaging_and_with_the_fallback_pattern(version: str, valid: bool) -> None:
    """`packaging.version` and the documented PEP 440 pattern agree on every row."""
    assert is_pep440(version) is valid
    assert (PEP440.fullmatch(version) is not None) is valid


@pytest.mark.parametrize(("version", "fmt", "argument"), [
    ("latest", "python", "version"), ("", "home", "version"), ("1\n2", "home", "version"),
])
def test_refused_versions_name_the_argument(version: str, fmt: str, argument: str) -> None:
    with pytest.raises(BadArgument) as caught:
        check_version(version, fmt)
    assert caught.value.argument == argument


def test_home_format_takes_any_single_line_version() -> None:
    assert check_version("latest", "home") == "latest"


def test_other_refusals_name_their_argument() -> None:
    calls: list[tuple[Callable[[], str], str]] = [(lambda: check_format("npm"), "format"),
                                                  (lambda: check_name("TFunnel", "python"), "name"),
                                                  (lambda: check_description("two\nlines"), "description"),
                                                  (lambda: check_package("json", "python"), "name")]
    for call, argument in calls:
        with pytest.raises(BadArgument) as caught:
            call()
        assert caught.value.argument == argument
        assert str(caught.value).startswith(f"{argument}: ")
    assert check_name("tfunnel", "home") == "tfunnel"  # only a python project would shadow tfunnel
    assert check_package("json", "home") == "json"


K_FILE: Kind = "file"


@pytest.mark.parametrize(("path", "kind", "size", "approvals", "action"), [
    ("toolfunnel.json", K_FILE, 10, False, "take"),
    ("tools", "dir", 0, False, "take"),
    ("tools/tools.register.json", K_FILE, 10, False, "take"),
    ("tools/tools.state.json", K_FILE, 10, False, "take"),
    ("tools/scripts/run.sh", K_FILE, 10, False, "take"),
    ("hooks/scripts/x.py", K_FILE, 10, False, "take"),
    ("mcp/expose.json", K_FILE, 10, False, "take"),
    ("logs", "dir", 0, False, "skip"),
    ("auth", "dir", 0, False, "skip"),
    ("dist", "dir", 0, False, "skip"),
    ("notes.txt", K_FILE, 10, False, "skip"),
    ("tools/logs", "dir", 0, False, "skip"),
    ("tools/scripts/node_modules", "dir", 0, False, "skip"),
    ("tools/scripts/__pycache__", "dir", 0, False, "skip"),
    ("mcp/servers/packages", "dir", 0, False, "skip"),
    ("tools/.git", "dir", 0, False, "skip"),
    ("tools/.env", K_FILE, 10, False, "skip"),
    ("tools/scripts/x.py~", K_FILE, 10, False, "skip"),
    ("tools/scripts/.x.py.swp", K_FILE, 10, False, "skip"),
    ("tools/scripts/x.swp", K_FILE, 10, False, "skip"),
    ("tools/scripts/.#x.py", K_FILE, 10, False, "skip"),
    ("tools/scripts/x.tmp", K_FILE, 10, False, "skip"),
    ("tools/scripts/x.pyc", K_FILE, 10, False, "skip"),
    ("tools/.tools.state.json.123.abcd.tfunnel-tmp", K_FILE, 10, False, "skip"),
    ("tools/x.tfunnel-tmp", K_FILE, 10, False, "skip"),
    ("mcp/tool-approvals.json", K_FILE, 10, False, "skip"),
    ("mcp/tool-approvals.json", K_FILE, 10, True, "take"),
    ("tools/scripts/secret", "outside-link", 0, False, "warn"),
    ("tools/scripts/gone", "broken-link", 0, False, "warn"),
    ("tools/scripts/fifo", "special", 0, False, "warn"),
    ("tools/scripts/big.bin", K_FILE, MAX_FILE_BYTES + 1, False, "warn"),
    ("tools/scripts/edge.bin", K_FILE, MAX_FILE_BYTES, False, "take"),
    ("toolfunnel.json", "dir", 0, False, "skip"),
])
def test_which_entries_are_copied(path: str, kind: Kind, size: int, approvals: bool, action: str) -> None:
    verdict = decide(path.split("/"), kind, size, approvals=approvals)
    assert verdict.action == action, verdict
    assert verdict.action == "take" or verdict.reason


HOME = Path("/h")


@pytest.mark.parametrize(("out", "copy_root", "refused"), [
    ("/h/dist/x", "/h/dist/x", False),
    ("/elsewhere/x", "/elsewhere/x", False),
    ("/", "/", False),  # an ancestor of the home: not copied into itself (needs force, not empty)
    ("/h", "/h", True),
    ("/h/tools/out", "/h/tools/out", True),
    ("/h/mcp", "/h/mcp", True),
    ("/h/hooks/a/b", "/h/hooks/a/b", True),
    ("/h/logs/x", "/h/logs/x", False),
    ("/h/toolfunnel.json", "/h/toolfunnel.json", True),
    ("/", "/h", True),  # the python format's copy would land on the home itself
])
def test_destinations(out: str, copy_root: str, refused: bool) -> None:
    assert (destination_problem(HOME, Path(out), Path(copy_root)) is not None) is refused


@pytest.mark.parametrize(("target", "approvals", "copied"), [
    ("tools/scripts/lib.py", False, True),
    ("mcp", False, True),
    ("toolfunnel.json", False, True),
    ("logs", False, False),
    ("logs/toolfunnel.log.jsonl", False, False),
    ("auth/tokens.json", False, False),
    ("tools/scripts/node_modules/x.js", False, False),
    ("tools/.secrets/key", False, False),
    ("mcp/tool-approvals.json", False, False),
    ("mcp/tool-approvals.json", True, True),
    ("", False, False),  # the home itself
])
def test_a_symlink_is_followed_only_to_what_a_copy_takes(target: str, approvals: bool, copied: bool) -> None:
    parts = tuple(target.split("/")) if target else ()
    assert copied_target(parts, approvals=approvals) is copied
    if not copied:
        assert decide(("tools", "link"), "excluded-link").action == "warn"
