"""The hook manifest: loading and validation, matchers, `tfunnel check`/`serve` refusal, the
`tfunnel hook` command (in-process, `tfunnel.testing.cli`), and live reload of hooks in a running
gateway (in-process, `tfunnel.testing.gateway`). The real `tfunnel serve` command refusing to start,
and a `tfunnel hook disable` process reaching a running gateway process, are in
tests/e2e/test_hook_manifest.py."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.hooks import EXIT2_DENY, set_hooks
from tests.wire import Wire
from tfunnel.errors import ConfigError
from tfunnel.gate.manifest import HookManifest, load_hook_state, load_manifest
from tfunnel.testing.cli import run
from tfunnel.testing.gateway import StdioGateway, stdio_gateway

pytestmark = pytest.mark.timeout(90)

MANIFEST = "hooks/hooks.manifest.json"
STATE = "hooks/hooks.state.json"
EXAMPLE_IDS = ["pre-tool-use/deny-dangerous", "pre-tool-use/guard-danger-demo", "post-tool-use/audit",
               "pre-tool-use/protect-paths", "pre-tool-use/deny-dangerous-http"]


def write_manifest(home: Path, doc: Any) -> None:
    path = home / MANIFEST
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))


def row(**fields: Any) -> dict[str, Any]:
    """A valid PreToolUse manifest row, with `fields` laid over it (None removes a key)."""
    base: dict[str, Any] = {"id": "bad", "event": "PreToolUse", "matcher": "*", "type": "command",
                            "command": "true"}
    base.update(fields)
    return {k: v for k, v in base.items() if v is not None}


def load_rows(home: Path, *rows: dict[str, Any], **top: Any) -> HookManifest:
    write_manifest(home, {"version": 1, **top, "hooks": list(rows)})
    return load_manifest(home)


def cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run(home, *args)


def manifest_rows(home: Path) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = json.loads((home / MANIFEST).read_text())["hooks"]
    return rows


# --- load_manifest --------------------------------------------------------------------------------


def test_missing_manifest_means_no_hooks(tmp_path: Path) -> None:
    """A home without hooks/hooks.manifest.json loads as an empty manifest (no error)."""
    manifest = load_manifest(tmp_path)
    assert manifest.hooks == ()
    assert manifest.hooks_dir == tmp_path / "hooks"


@pytest.mark.parametrize(("hooks_dir", "expected"), [
    (None, "{home}/hooks"),
    ("/opt/shared-hooks", "/opt/shared-hooks"),
    ("relative/hooks", "{home}/hooks"),
], ids=["default", "absolute-hooksDir", "relative-hooksDir-ignored"])
def test_hooks_dir_token_is_expanded(tmp_path: Path, hooks_dir: str | None, expected: str) -> None:
    """${HOOKS_DIR} becomes the hooks folder, or an absolute hooksDir; a relative hooksDir is ignored."""
    top = {} if hooks_dir is None else {"hooksDir": hooks_dir}
    manifest = load_rows(tmp_path, row(command="python3 ${HOOKS_DIR}/scripts/x.py --dir=${HOOKS_DIR}"),
                         **top)
    folder = expected.format(home=tmp_path)
    assert manifest.hooks_dir == Path(folder)
    assert manifest.hooks[0].command == f"python3 {folder}/scripts/x.py --dir={folder}"


def test_enabled_defaults_to_false(tmp_path: Path) -> None:
    """A row without `enabled` is loaded but disabled: it is not active for its event."""
    manifest = load_rows(tmp_path, row(id="quiet"), row(id="loud", enabled=True))
    assert [(h.id, h.enabled) for h in manifest.hooks] == [("quiet", False), ("loud", True)]
    assert [h.id for h in manifest.active("PreToolUse")] == ["loud"]


@pytest.mark.parametrize("wrapped", [False, True], ids=["flat", "wrapped"])
def test_state_overlay_wins_over_the_manifest(tmp_path: Path, wrapped: bool) -> None:
    """hooks.state.json ({id: bool} or {"enabled": {...}}) overrides each row's `enabled` both ways."""
    overlay = {"on-in-manifest": False, "off-in-manifest": True, "not-a-hook": True}
    (tmp_path / "hooks").mkdir()
    (tmp_path / STATE).write_text(json.dumps({"enabled": overlay} if wrapped else overlay))
    manifest = load_rows(tmp_path, row(id="on-in-manifest", enabled=True),
                         row(id="off-in-manifest", enabled=False), row(id="untouched", enabled=True))
    assert {h.id: h.enabled for h in manifest.hooks} == {
        "on-in-manifest": False, "off-in-manifest": True, "untouched": True}


@pytest.mark.parametrize("text", ["{not json", "[true]", '"on"', '{"on-in-manifest": "no"}', ""],
                         ids=["bad-json", "array", "string", "non-bool-value", "empty"])
def test_malformed_overlay_refuses_instead_of_reading_as_empty(tmp_path: Path, text: str) -> None:
    """A malformed hooks.state.json (a bad entry included) is a ConfigError naming the file, for the
    overlay and for the manifest it applies to: never a silent `{}` that would switch hooks back."""
    (tmp_path / "hooks").mkdir()
    (tmp_path / STATE).write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_hook_state(tmp_path)
    assert caught.value.problems and all(p.file == STATE for p in caught.value.problems)
    write_manifest(tmp_path, {"version": 1, "hooks": [row(id="on-in-manifest", enabled=True)]})
    with pytest.raises(ConfigError) as again:
        load_manifest(tmp_path)
    assert [p.file for p in again.value.problems] == [p.file for p in caught.value.problems]


def test_id_less_row_gets_a_stable_synthesized_id(tmp_path: Path) -> None:
    """A ToolFunnel row without an id loads with a unique id that is the same on every load."""
    rows = [row(id="named"), row(id=None), row(id=None, event="PostToolUse")]
    first = load_rows(tmp_path, *rows)
    again = load_rows(tmp_path, *rows)
    ids = [h.id for h in first.hooks]
    assert ids == [h.id for h in again.hooks]
    assert ids[0] == "named" and all(ids) and len(set(ids)) == 3
    (tmp_path / STATE).write_text(json.dumps({ids[1]: True}))
    assert [h.id for h in load_manifest(tmp_path).hooks if h.enabled] == [ids[1]]


INVALID: list[tuple[str, Any, list[str]]] = [
    ("bad-event", [row(event="OnSave")], ["hooks[0] (id 'bad')", "field 'event'", "OnSave"]),
    ("missing-event", [row(event=None)], ["hooks[0] (id 'bad')", "field 'event'", "is required"]),
    ("missing-command", [row(command=None)], ["hooks[0] (id 'bad')", "field 'command'", "is required"]),
    ("empty-command", [row(command="")], ["hooks[0] (id 'bad')", "field 'command'", "non-empty"]),
    ("bad-matcher", [row(matcher="(unclosed")],
     ["hooks[0] (id 'bad')", "field 'matcher'", "not a valid regular expression"]),
    ("duplicate-id", [row(id="twice"), row(id="twice")],
     ["hooks[1] (id 'twice')", "field 'id'", "duplicate"]),
    ("timeout-zero", [row(timeout=0)], ["hooks[0] (id 'bad')", "field 'timeout'", "positive number"]),
    ("timeout-string", [row(timeout="10")], ["hooks[0] (id 'bad')", "field 'timeout'", '"10"']),
    ("failClosed-string", [row(failClosed="yes")], ["hooks[0] (id 'bad')", "field 'failClosed'", '"yes"']),
    ("type-unknown", [row(type="prompt")], ["hooks[0] (id 'bad')", "field 'type'", "command, http"]),
    ("http-without-url", [row(type="http", command=None)],
     ["hooks[0] (id 'bad')", "field 'url'", "required"]),
    ("http-empty-url", [row(type="http", command=None, url="")], ["field 'url'", "non-empty"]),
    ("http-with-command", [row(type="http", url="https://hooks.example/pre")],
     ["hooks[0] (id 'bad')", "field 'command'", '"type": "command" hook']),
    ("command-with-url", [row(url="https://hooks.example/pre")],
     ["hooks[0] (id 'bad')", "field 'url'", '"type": "http" hook']),
    ("command-with-headers", [row(headers={"X-A": "b"})], ["field 'headers'", '"type": "http" hook']),
    ("command-with-allowedEnvVars", [row(allowedEnvVars=["A"])], ["field 'allowedEnvVars'", "http"]),
    ("http-plain-remote", [row(type="http", command=None, url="http://hooks.example/pre")],
     ["field 'url'", "must use https", "loopback"]),
    ("http-userinfo", [row(type="http", command=None, url="https://me:pw@hooks.example/pre")],
     ["field 'url'", "user name or password"]),
    ("http-not-absolute", [row(type="http", command=None, url="hooks.example/pre")],
     ["field 'url'", "absolute https URL"]),
    ("http-other-scheme", [row(type="http", command=None, url="ftp://hooks.example/pre")],
     ["field 'url'", "absolute https URL"]),
    ("http-url-not-string", [row(type="http", command=None, url=5)], ["field 'url'", "string"]),
    ("http-header-name", [row(type="http", command=None, url="https://h.example", headers={"X A": "b"})],
     ["field 'headers.X A'", "header name"]),
    ("http-header-value", [row(type="http", command=None, url="https://h.example", headers={"X-A": 1})],
     ["field 'headers.X-A'", "must be a string"]),
    ("http-header-line-break", [row(type="http", command=None, url="https://h.example",
                                    headers={"X-A": "a\r\nX-B: b"})], ["field 'headers.X-A'", "line breaks"]),
    ("http-headers-not-object", [row(type="http", command=None, url="https://h.example", headers=["a"])],
     ["field 'headers'", "object"]),
    ("http-allowed-dollar", [row(type="http", command=None, url="https://h.example", allowedEnvVars=["$T"])],
     ["field 'allowedEnvVars'", "variable names"]),
    ("http-allowed-not-array", [row(type="http", command=None, url="https://h.example", allowedEnvVars="T")],
     ["field 'allowedEnvVars'", "array"]),
    ("hooks-not-array", {"version": 1, "hooks": {"id": "bad"}}, ["field 'hooks'", "array"]),
    ("entry-not-object", ["not an object"], ["hooks[0]", "must be an object"]),
    ("bad-json", '{"version": 1, "hooks": [', ["invalid JSON"]),
]


@pytest.mark.parametrize(("doc", "expected"), [case[1:] for case in INVALID], ids=[c[0] for c in INVALID])
def test_invalid_manifest_raises_naming_file_entry_and_field(
    tmp_path: Path, doc: Any, expected: list[str]
) -> None:
    """Every invalid entry raises ConfigError naming hooks/hooks.manifest.json, the entry and the field."""
    write_manifest(tmp_path, {"version": 1, "hooks": doc} if isinstance(doc, list) else doc)
    with pytest.raises(ConfigError) as caught:
        load_manifest(tmp_path)
    assert len(caught.value.problems) == 1, caught.value.problems
    problem = caught.value.problems[0]
    assert problem.file == MANIFEST
    message = str(problem)
    assert message.startswith(f"{MANIFEST}: ")
    for part in expected:
        assert part in message, message


def test_several_problems_are_reported_at_once(tmp_path: Path) -> None:
    """One load reports every problem of every entry, not just the first."""
    write_manifest(tmp_path, {"version": 1, "hooks": [
        row(id="a", matcher="(unclosed", timeout=0), row(id="ok"), row(id="b", command=None, type="prompt")]})
    with pytest.raises(ConfigError) as caught:
        load_manifest(tmp_path)
    where = {(p.entry, p.field) for p in caught.value.problems}
    assert where == {("hooks[0] (id 'a')", "matcher"), ("hooks[0] (id 'a')", "timeout"),
                     ("hooks[2] (id 'b')", "command"), ("hooks[2] (id 'b')", "type")}


# --- HookSpec.matches -----------------------------------------------------------------------------

MATCHES: list[tuple[str, str | None, list[str], bool]] = [
    ("empty-fires-always", "", ["anything"], True),
    ("star-fires-always", "*", ["anything"], True),
    ("absent-fires-always", None, ["anything"], True),
    ("exact-name", "danger", ["danger"], True),
    ("anchored-not-prefix", "danger", ["dangerous"], False),
    ("anchored-not-suffix", "danger", ["the-danger"], False),
    ("display-name", "Danger Demo", ["danger", "Danger Demo"], True),
    ("display-name-needs-it", "Danger Demo", ["danger"], False),
    ("any-of-the-names", "hash", ["toolfunnel_x", "hash", "Hash"], True),
    ("claude-code-mcp-form", "mcp__.*__.*", ["github_create_issue", "mcp__github__create_issue"], True),
    ("claude-code-mcp-form-only", "mcp__.*__.*", ["github_create_issue"], False),
    ("alternation-left", "hash|danger", ["hash"], True),
    ("alternation-right", "hash|danger", ["danger"], True),
    ("alternation-anchored", "hash|danger", ["hashdanger"], False),
    ("alternation-miss", "hash|danger", ["uuid"], False),
    ("case-sensitive-lower", "danger", ["Danger", "DANGER"], False),
    ("case-sensitive-upper", "Danger Demo", ["danger demo"], False),
]


@pytest.mark.parametrize(("matcher", "names", "expected"), [c[1:] for c in MATCHES],
                         ids=[c[0] for c in MATCHES])
def test_matcher_semantics(tmp_path: Path, matcher: str | None, names: list[str], expected: bool) -> None:
    """Empty, "*" and absent fire always; otherwise a case-sensitive full match against any name."""
    spec = load_rows(tmp_path, row(matcher=matcher)).hooks[0]
    assert spec.matches(names) is expected


# --- tfunnel check / serve refuse a bad manifest --------------------------------------------------

BAD_ROWS = [
    ("bad-matcher", row(id="broken", matcher="(unclosed"), "field 'matcher'"),
    ("bad-event", row(id="broken", event="OnSave"), "field 'event'"),
]


@pytest.mark.parametrize(("bad", "field"), [c[1:] for c in BAD_ROWS], ids=[c[0] for c in BAD_ROWS])
def test_check_names_the_bad_hook_and_exits_1(home: Path, bad: dict[str, Any], field: str) -> None:
    """`tfunnel check` prints the manifest problem with file, entry and field, and exits 1."""
    rows = manifest_rows(home)
    write_manifest(home, {"version": 1, "hooks": [rows[0], bad]})
    done = cli(home, "check")
    assert done.returncode == 1, done
    line = next(ln for ln in done.stdout.splitlines() if ln.startswith(MANIFEST))
    assert line.startswith(f"{MANIFEST}: hooks[1]") and field in line, line


# --- tfunnel hook list|enable|disable|remove ------------------------------------------------------


def test_hook_list_shows_the_disabled_examples(home: Path) -> None:
    """`hook list` on a seeded home prints one JSON row per example hook, all disabled (the http
    one too: it needs its hook server running)."""
    done = cli(home, "hook", "list")
    assert done.returncode == 0, done
    listed = [json.loads(line) for line in done.stdout.splitlines()]
    assert [r["id"] for r in listed] == EXAMPLE_IDS
    assert all(r["enabled"] is False for r in listed)
    assert listed[0]["command"] == f"python3 {home}/hooks/scripts/deny_dangerous.py"
    assert listed[-1]["type"] == "http" and listed[-1]["url"] == "http://127.0.0.1:8377/pre-tool-use"


def test_hook_list_marks_events_that_never_fire(home: Path) -> None:
    """UserPromptSubmit and PreCompact rows are listed with "(never fires in a gateway)"."""
    doc = json.loads((home / MANIFEST).read_text())
    doc["hooks"] += [row(id="prompt", event="UserPromptSubmit"), row(id="compact", event="PreCompact")]
    write_manifest(home, doc)
    done = cli(home, "hook", "list")
    assert done.returncode == 0, done
    marks = {json.loads(line.split("  (")[0])["id"]: line.endswith("(never fires in a gateway)")
             for line in done.stdout.splitlines()}
    assert marks == {**dict.fromkeys(EXAMPLE_IDS, False), "prompt": True, "compact": True}


@pytest.mark.parametrize(("action", "start", "value"), [("enable", False, True), ("disable", True, False)])
def test_enable_disable_write_overlay_and_mirror_into_manifest(
    home: Path, action: str, start: bool, value: bool
) -> None:
    """enable/disable write the overlay and mirror `enabled` into the row; unknown keys, ${HOOKS_DIR} kept."""
    doc = json.loads((home / MANIFEST).read_text())
    doc["x-top"] = "kept"
    doc["hooks"][0].update({"enabled": start, "x-note": {"kept": [1, 2]}})
    write_manifest(home, doc)
    done = cli(home, "hook", action, EXAMPLE_IDS[0])
    assert done.returncode == 0, done
    assert json.loads((home / STATE).read_text()) == {EXAMPLE_IDS[0]: value}
    after = json.loads((home / MANIFEST).read_text())
    doc["hooks"][0]["enabled"] = value
    assert after == doc
    assert after["hooks"][0]["command"] == "python3 ${HOOKS_DIR}/scripts/deny_dangerous.py"
    assert {h.id: h.enabled for h in load_manifest(home).hooks}[EXAMPLE_IDS[0]] is value


def test_remove_drops_the_row_and_its_overlay_key(home: Path) -> None:
    """remove deletes the manifest row and its hooks.state.json key; other hooks and the script stay."""
    (home / STATE).write_text(json.dumps({EXAMPLE_IDS[1]: True, EXAMPLE_IDS[2]: True}))
    done = cli(home, "hook", "remove", EXAMPLE_IDS[1])
    assert done.returncode == 0, done
    assert [r["id"] for r in manifest_rows(home)] == [i for i in EXAMPLE_IDS if i != EXAMPLE_IDS[1]]
    assert json.loads((home / STATE).read_text()) == {EXAMPLE_IDS[2]: True}
    assert (home / "hooks" / "scripts" / "guard_danger_demo.py").exists()


@pytest.mark.parametrize("action", ["enable", "disable", "remove"])
def test_unknown_hook_id_exits_1_naming_known_ids(home: Path, action: str) -> None:
    """An unknown id is refused with exit 1 and the known ids; nothing is written."""
    before = (home / MANIFEST).read_text()
    done = cli(home, "hook", action, "no/such-hook")
    assert done.returncode == 1, done
    assert "'no/such-hook'" in done.stderr
    assert all(hook_id in done.stderr for hook_id in EXAMPLE_IDS)
    assert (home / MANIFEST).read_text() == before and not (home / STATE).exists()


def test_hook_enable_without_an_id_is_a_usage_error(home: Path) -> None:
    """`tfunnel hook enable` with no id exits 2 with a usage message."""
    done = cli(home, "hook", "enable")
    assert done.returncode == 2, done
    assert "usage:" in done.stderr and "needs a hook id" in done.stderr


# --- live reload in a running gateway -------------------------------------------------------------


async def run_tool(wire: Wire | StdioGateway, request_id: int, name: str, args: dict[str, Any],
                   ) -> dict[str, Any]:
    reply = await wire.request(request_id, "tools/call",
                               {"name": "toolfunnel_run_tool", "arguments": {"name": name, "args": args}})
    result: dict[str, Any] = reply["result"]
    return result


async def wait_for_log(wire: Wire | StdioGateway, text: str, since: int, timeout: float = 10.0) -> str:
    """Wait for `text` in the gateway's stderr written after byte offset `since`; return that part."""
    with trio.fail_after(timeout):
        while text not in (new := wire.stderr[since:].decode(errors="replace")):
            await trio.sleep(0.05)
    return new


async def test_enabling_a_hook_in_the_manifest_applies_without_restart(home: Path) -> None:
    """Setting `enabled: true` on deny-dangerous while serving denies the very next dangerous call."""
    async with stdio_gateway(home) as wire:
        await wire.initialize()
        assert not (await run_tool(wire, 1, "echo", {"cmd": "rm -rf /"})).get("isError")
        doc = json.loads((home / MANIFEST).read_text())
        doc["hooks"][0]["enabled"] = True
        mark = len(wire.stderr)
        write_manifest(home, doc)
        await wait_for_log(wire, "hooks reloaded", mark)
        denied = await run_tool(wire, 2, "echo", {"cmd": "rm -rf /"})
        assert denied.get("isError") is True
        assert "deny-dangerous" in denied["content"][0]["text"]


async def test_broken_manifest_edit_is_refused_and_old_hooks_keep_working(home: Path) -> None:
    """A reload with a bad matcher is refused with the reason logged; the enabled deny still denies."""
    set_hooks(home, {"id": "no-hash", "matcher": "hash", "command": EXIT2_DENY})
    async with stdio_gateway(home) as wire:
        await wire.initialize()
        assert (await run_tool(wire, 1, "hash", {"text": "a"})).get("isError") is True
        mark = len(wire.stderr)
        write_manifest(home, {"version": 1, "hooks": [
            row(id="no-hash", matcher="hash", command=EXIT2_DENY, enabled=False),
            row(id="broken", matcher="(unclosed", enabled=True)]})
        log = await wait_for_log(wire, "hook manifest reload refused", mark)
        assert MANIFEST in log and "hooks[1] (id 'broken')" in log and "field 'matcher'" in log
        assert "not a valid regular expression" in log
        still = await run_tool(wire, 2, "hash", {"text": "a"})
        assert still.get("isError") is True and still["content"][0]["text"] == "exit-2 says no"
        assert not (await run_tool(wire, 3, "uuid", {})).get("isError")
