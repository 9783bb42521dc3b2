"""Table-driven tests for register tool plumbing: outcome → CallToolResult, script resolution and argv."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

from tfunnel.config.model import Invoke
from tfunnel.proc.children import ProcessOutcome
from tfunnel.protocol.modern import complete
from tfunnel.protocol.results import ToolResult
from tfunnel.tools.resolve import ScriptNotRunnable, invoke_argv, resolve_script, script_argv
from tfunnel.tools.result import ERROR_TAIL_CHARS, map_outcome

CAP = 1000


def outcome(returncode: int | None = 0, stdout: bytes = b"", stderr: bytes = b"", *,
            stdout_total: int | None = None, timed_out: bool = False) -> ProcessOutcome:
    return ProcessOutcome(
        returncode=returncode, stdout=stdout, stderr=stderr,
        stdout_total=len(stdout) if stdout_total is None else stdout_total,
        stderr_total=len(stderr), timed_out=timed_out, duration_s=0.01,
    )


def text(value: str) -> list[dict[str, str]]:
    return [{"type": "text", "text": value}]


# --------------------------------------------------------------------------- map_outcome


@pytest.mark.parametrize(
    ("result", "wire"),
    [
        pytest.param(outcome(0, b'{"ok": true, "n": 1}\n'),
                     {"content": text('{"ok": true, "n": 1}'), "structuredContent": {"ok": True, "n": 1}},
                     id="json-object-structured"),
        pytest.param(outcome(0, b"  [1, 2]\n"), {"content": text("[1, 2]")}, id="json-array-text-only"),
        pytest.param(outcome(0, b'"just a string"'), {"content": text('"just a string"')}, id="json-string"),
        pytest.param(outcome(0, b"42\n"), {"content": text("42")}, id="json-number"),
        pytest.param(outcome(0, b"hello\nworld\n"), {"content": text("hello\nworld\n")}, id="plain-text"),
        pytest.param(outcome(0, b'{"a": 1}\n{"b": 2}\n'), {"content": text('{"a": 1}\n{"b": 2}\n')},
                     id="two-json-values-are-text"),
        pytest.param(outcome(0, b""), {"content": text("")}, id="empty"),
        pytest.param(outcome(0, b"caf\xc3\xa9 \xff"), {"content": text("café \ufffd")},
                     id="bad-utf8-replaced"),
        pytest.param(outcome(0, b"out", b"warnings on stderr"), {"content": text("out")},
                     id="stderr-ignored-on-0"),
    ],
)
def test_map_outcome_success(result: ProcessOutcome, wire: dict[str, object]) -> None:
    """Exit 0: one JSON value → that JSON (+ structuredContent for an object); otherwise stdout as text."""
    assert map_outcome("t", result, 60, CAP).to_wire() == wire


@pytest.mark.parametrize(
    "stdout",
    [pytest.param(b'{"a": 1}', id="json-prefix"), pytest.param(b"x" * CAP, id="text")],
)
def test_map_outcome_truncated(stdout: bytes) -> None:
    """Truncated stdout is returned with a marker and never parsed as JSON."""
    wire = map_outcome("t", outcome(0, stdout, stdout_total=CAP * 5), 60, CAP).to_wire()
    assert "structuredContent" not in wire and "isError" not in wire
    body = wire["content"][0]["text"]
    assert body.startswith(stdout.decode())
    assert body.endswith(f"[output truncated: {CAP * 5} bytes, cap {CAP} bytes]")


@pytest.mark.parametrize(
    ("result", "fragments", "absent"),
    [
        pytest.param(outcome(3, b"partial", b"Traceback\nValueError: boom\n"),
                     ["tool 't' exited with status 3", "ValueError: boom"], ["partial"], id="stderr-tail"),
        pytest.param(outcome(2, b"usage: t ARG\n", b""), ["exited with status 2", "usage: t ARG"], [],
                     id="falls-back-to-stdout"),
        pytest.param(outcome(1, b'{"ok": false}', b"  \n"), ["exited with status 1", '{"ok": false}'], [],
                     id="blank-stderr-falls-back"),
        pytest.param(outcome(1), ["exited with status 1"], [":"], id="no-output"),
        pytest.param(outcome(-9, b"", b"half"), ["was killed by SIGKILL", "half"], ["status"], id="sigkill"),
        pytest.param(outcome(-15), ["was killed by SIGTERM"], [], id="sigterm"),
        pytest.param(outcome(-200), ["was killed by signal 200"], [], id="unknown-signal"),
        pytest.param(outcome(None, b"x", timed_out=True), ["tool 't' timed out after 2.5 s", "timeoutS"],
                     ["x"], id="timeout"),
        pytest.param(outcome(0, b'{"a": 1}', timed_out=True), ["timed out after 2.5 s"], [],
                     id="timeout-wins-over-exit-0"),
    ],
)
def test_map_outcome_failure(result: ProcessOutcome, fragments: list[str], absent: list[str]) -> None:
    """Non-zero exit, a signal or a timeout is isError naming why, with the stderr (or stdout) tail."""
    wire = map_outcome("t", result, 2.5, CAP).to_wire()
    assert wire["isError"] is True
    assert "structuredContent" not in wire
    body = wire["content"][0]["text"]
    for fragment in fragments:
        assert fragment in body
    for fragment in absent:
        assert fragment not in body


def test_map_outcome_error_tail_is_bounded() -> None:
    """A long stderr is cut to its last ERROR_TAIL_CHARS characters."""
    stderr = ("head" + "x" * (ERROR_TAIL_CHARS * 2) + "the end").encode()
    body = map_outcome("t", outcome(1, b"", stderr), 60, CAP).first_text()
    assert body.endswith("the end")
    assert "head" not in body
    assert len(body) < ERROR_TAIL_CHARS + 100


# --------------------------------------------------------------------------- resolve_script


@pytest.fixture
def script_home(tmp_path: Path) -> Path:
    """A home with scripts, a file beside the home, and symlinks that point outside tools/scripts."""
    home = tmp_path / "home"
    scripts = home / "tools" / "scripts"
    (scripts / "sub").mkdir(parents=True)
    for rel in ("x.py", "x.js", "sub/z.sh"):
        (scripts / rel).write_text("#!/bin/sh\n")
    (home / "outside.py").write_text("evil")
    (tmp_path / "outside.py").write_text("evil")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "evil.py").write_text("evil")
    (scripts / "link.py").symlink_to(elsewhere / "evil.py")
    (scripts / "linkdir").symlink_to(elsewhere, target_is_directory=True)
    return home


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        pytest.param("tools/scripts/x.py", "x.py", id="home-relative"),
        pytest.param("x.py", "x.py", id="scripts-relative"),
        pytest.param("tools/scripts/x.js", "x.js", id="toolfunnel-js"),
        pytest.param("./tools/scripts/x.py", "x.py", id="dot-prefix"),
        pytest.param("sub/z.sh", "sub/z.sh", id="subfolder"),
        pytest.param("tools/scripts/sub/../x.py", "x.py", id="dotdot-staying-inside"),
        pytest.param("{scripts}/x.py", "x.py", id="absolute-inside"),
        pytest.param("some/other/dir/x.py", "x.py", id="toolfunnel-bare-name"),
    ],
)
def test_resolve_script_accepts(script_home: Path, path: str, expected: str) -> None:
    """A script path resolves to the file inside tools/scripts in every accepted spelling."""
    scripts = (script_home / "tools" / "scripts").resolve()
    assert resolve_script(script_home, path.replace("{scripts}", str(scripts))) == scripts / expected


@pytest.mark.parametrize(
    "path",
    [
        pytest.param("{t}/elsewhere/evil.py", id="absolute-outside"),
        pytest.param("{t}/home/outside.py", id="absolute-in-home-outside-scripts"),
        pytest.param("outside.py", id="home-file-not-in-scripts"),
        pytest.param("../../outside.py", id="dotdot-into-home"),
        pytest.param("../../../outside.py", id="dotdot-beside-home"),
        pytest.param("tools/scripts/../../outside.py", id="dotdot-after-prefix"),
        pytest.param("link.py", id="symlink-outside"),
        pytest.param("tools/scripts/link.py", id="symlink-outside-prefixed"),
        pytest.param("linkdir/evil.py", id="symlinked-dir-outside"),
        pytest.param("missing.py", id="missing"),
        pytest.param("sub", id="directory"),
    ],
)
def test_resolve_script_refuses(script_home: Path, path: str) -> None:
    """Paths escaping tools/scripts (absolute, ../, symlinks) or naming no file are refused."""
    with pytest.raises(ScriptNotRunnable):
        resolve_script(script_home, path.replace("{t}", str(script_home.parent)))


def test_resolve_script_names_outside(script_home: Path) -> None:
    """An absolute path outside tools/scripts is refused with a message saying so."""
    with pytest.raises(ScriptNotRunnable, match="outside tools/scripts/"):
        resolve_script(script_home, str(script_home.parent / "elsewhere" / "evil.py"))


# --------------------------------------------------------------------------- script_argv


@pytest.mark.parametrize(
    ("name", "content", "executable", "prefix"),
    [
        pytest.param("a.py", b"#!/usr/bin/env python3\nprint(1)\n", False, ["/usr/bin/env", "python3"],
                     id="shebang-env"),
        pytest.param("a.sh", b"#!/bin/sh -e\n", False, ["/bin/sh", "-e"], id="shebang-beats-extension"),
        pytest.param("a.js", b"#! /usr/bin/node\r\nx\n", False, ["/usr/bin/node"], id="shebang-space-crlf"),
        pytest.param("a.py", b"print(1)\n", False, [sys.executable], id="py"),
        pytest.param("A.PY", b"print(1)\n", False, [sys.executable], id="py-upper"),
        pytest.param("a.py", b"#!\nprint(1)\n", False, [sys.executable], id="empty-shebang-falls-back"),
        pytest.param("a.js", b"console.log(1)\n", False, ["node"], id="js"),
        pytest.param("a.mjs", b"", False, ["node"], id="mjs"),
        pytest.param("a.cjs", b"", False, ["node"], id="cjs"),
        pytest.param("a.sh", b"echo hi\n", False, ["bash"], id="sh"),
        pytest.param("tool", b"\x7fELF", True, [], id="executable-directly"),
        pytest.param("tool.rb", b"puts 1\n", True, [], id="unknown-ext-executable"),
    ],
)
def test_script_argv(tmp_path: Path, name: str, content: bytes, executable: bool, prefix: list[str]) -> None:
    """Interpreter by shebang, then by extension, then the file itself when executable."""
    script = tmp_path / name
    script.write_bytes(content)
    if executable:
        script.chmod(0o755)
    assert script_argv(script) == [*prefix, str(script)]


@pytest.mark.parametrize(
    ("name", "content"),
    [
        pytest.param("tool", b"\x7fELF", id="no-ext-not-executable"),
        pytest.param("tool.rb", b"puts 1\n", id="unknown-ext-not-executable"),
    ],
)
def test_script_argv_not_runnable(tmp_path: Path, name: str, content: bytes) -> None:
    """No shebang, no known extension and not executable → ScriptNotRunnable."""
    script = tmp_path / name
    script.write_bytes(content)
    script.chmod(0o644)
    with pytest.raises(ScriptNotRunnable, match="no shebang"):
        script_argv(script)


def test_script_argv_malformed_shebang(tmp_path: Path) -> None:
    """A shebang shlex cannot split yields an argv or ScriptNotRunnable, never another exception."""
    script = tmp_path / "q.py"
    script.write_bytes(b"#!/usr/bin/env 'python3\nprint(1)\n")
    try:
        argv = script_argv(script)
    except ScriptNotRunnable:
        return
    assert argv[-1] == str(script)


def test_invoke_argv(script_home: Path) -> None:
    """A shell invoke runs through /bin/sh -c; a script invoke through its interpreter."""
    assert invoke_argv(script_home, Invoke("shell", "echo hi | wc")) == ["/bin/sh", "-c", "echo hi | wc"]
    script = (script_home / "tools" / "scripts" / "x.py").resolve()
    assert invoke_argv(script_home, Invoke("script", "x.py")) == ["/bin/sh", str(script)]


# --------------------------------------------------------------------------- an upstream's result


@pytest.mark.parametrize(
    ("meta", "kept"),
    [
        pytest.param({"example.com/trace": "t1", "n": 2}, {"example.com/trace": "t1", "n": 2}, id="own-keys"),
        pytest.param({"io.modelcontextprotocol/serverInfo": {"name": "up"}, "k": 1}, {"k": 1},
                     id="protocol-keys-dropped"),
        pytest.param({"io.modelcontextprotocol/serverInfo": {"name": "up"}}, None, id="only-protocol-keys"),
        pytest.param("not-a-dict", None, id="malformed"),
        pytest.param(None, None, id="absent"),
    ],
)
def test_an_upstream_results_meta_is_kept_without_its_protocol_keys(meta: object, kept: object) -> None:
    """`from_wire` keeps the upstream's own `_meta` keys and `to_wire` sends them; the keys the
    protocol owns describe the upstream's hop and are dropped."""
    wire: dict[str, object] = {"content": text("hi")}
    if meta is not None:
        wire["_meta"] = meta
    result = ToolResult.from_wire(wire)
    assert result.meta == kept
    expected: dict[str, object] = {"content": text("hi")}
    if kept is not None:
        expected["_meta"] = kept
    assert result.to_wire() == expected


def test_on_a_modern_result_our_server_info_sits_beside_the_upstreams_meta() -> None:
    """`modern.complete` adds our serverInfo next to the upstream's kept keys."""
    upstream = ToolResult.from_wire({"content": text("hi"), "_meta": {
        "io.modelcontextprotocol/serverInfo": {"name": "up"}, "example.com/trace": "t1"}})
    out = complete(upstream.to_wire(), "tools/call", {"name": "tfunnel", "version": "1"})
    assert out["_meta"] == {"example.com/trace": "t1",
                            "io.modelcontextprotocol/serverInfo": {"name": "tfunnel", "version": "1"}}


VERBATIM = [
    {"content": [{"type": "text", "text": "hi"}]},
    {"content": [], "isError": False},
    {"content": [{"type": "text", "text": "x"}], "structuredContent": {"n": 1}, "isError": True},
    {"content": [{"type": "text", "text": "x"}], "_meta": {"trace": "abc"}},
]
REBUILT = [
    # (what the upstream sent, what the client must get)
    ({"content": [{"type": "text", "text": "x"}], "resultType": "complete", "ttlMs": 5},
     {"content": [{"type": "text", "text": "x"}]}),
    ({"content": [{"type": "text", "text": "x"}, "junk"]}, {"content": [{"type": "text", "text": "x"}]}),
    ({"content": [], "structuredContent": [1]}, {"content": []}),
    ({"content": [], "isError": "yes"}, {"content": []}),
    ({"content": [], "_meta": {"io.modelcontextprotocol/x": 1, "k": 2}}, {"content": [], "_meta": {"k": 2}}),
    ({"content": [], "_meta": {}}, {"content": []}),
    ({"content": "text"}, {"content": []}),
]


@pytest.mark.parametrize("wire", VERBATIM)
def test_an_upstream_result_that_needs_no_change_is_sent_as_it_came(wire: dict[str, object]) -> None:
    """The forwarded hot path rebuilds nothing: a result with only the known, well-formed
    fields goes back to the client as the very object that arrived."""
    assert ToolResult.from_wire(wire).to_wire() is wire


@pytest.mark.parametrize(("wire", "expected"), REBUILT)
def test_an_upstream_result_with_anything_else_is_rebuilt_without_it(
        wire: dict[str, object], expected: dict[str, object]) -> None:
    """Unknown fields, malformed ones and the upstream's protocol `_meta` keys never reach the
    client: such a result is rebuilt from what was read."""
    assert ToolResult.from_wire(wire).to_wire() == expected


def test_a_changed_result_is_rebuilt_not_sent_stale() -> None:
    """A result the gate changed (PreToolUse additionalContext appended) carries the change:
    the upstream's original object is not reused for it."""
    wire = {"content": [{"type": "text", "text": "x"}]}
    changed = dataclasses.replace(ToolResult.from_wire(wire),
                                  content=({"type": "text", "text": "x"}, {"type": "text", "text": "ctx"}))
    assert changed.to_wire() == {"content": [{"type": "text", "text": "x"}, {"type": "text", "text": "ctx"}]}
    assert wire == {"content": [{"type": "text", "text": "x"}]}
