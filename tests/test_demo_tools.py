"""Tests for the demo register tools: the scripts in conf/tools/scripts and their register."""

import hashlib
import json
import os
import re
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

pytestmark = pytest.mark.timeout(60)

SCRIPTS_DIR = Path(__file__).resolve().parents[1] / "conf" / "tools" / "scripts"
CONFIG_HOME = SCRIPTS_DIR.parents[1]
REGISTER_PATH = CONFIG_HOME / "tools" / "tools.register.json"

SCRIPT_FOR = {
    "echo": "echo.py",
    "base64": "b64.py",
    "hash": "hash_tool.py",
    "uuid": "uuid_tool.py",
    "json": "json_tool.py",
    "text-stats": "text_stats.py",
    "danger": "danger.py",
}
OPEN_SCHEMA_TOOLS = {"echo", "danger"}
ENTRY_KEYS = {"id", "name", "summary", "category", "instructions", "mode", "invoke", "inputSchema"}

ABC_DIGESTS = {
    "sha256": "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
    "sha1": "a9993e364706816aba3e25717850c26c9cd0d89d",
    "md5": "900150983cd24fb0d6963f7d28e17f72",
}
# (text, chars, words, lines, bytes)
TEXT_STATS_CASES = [
    ("a b\r\nc\n", 7, 3, 2, 7),
    ("", 0, 0, 0, 0),
    ("one", 3, 1, 1, 3),
    ("\n", 1, 0, 1, 1),
    ("x\n\ny", 4, 2, 3, 4),
    ("a\r\nb\r\n", 6, 2, 2, 6),
    ("é ✓", 3, 2, 1, 6),
]
JSON_DOC = '{"a": [1, 2], "b": "é"}'
# (args, output key, expected text)
JSON_CASES: list[tuple[dict[str, Any], str, str]] = [
    ({"text": JSON_DOC}, "pretty", '{\n  "a": [\n    1,\n    2\n  ],\n  "b": "é"\n}'),
    (
        {"text": JSON_DOC, "indent": 4},
        "pretty",
        '{\n    "a": [\n        1,\n        2\n    ],\n    "b": "é"\n}',
    ),
    ({"text": JSON_DOC, "indent": 0}, "pretty", '{"a":[1,2],"b":"é"}'),
    ({"text": JSON_DOC, "minify": True}, "minified", '{"a":[1,2],"b":"é"}'),
    ({"text": JSON_DOC, "indent": 4, "minify": True}, "minified", '{"a":[1,2],"b":"é"}'),
    ({"text": " [] ", "minify": False}, "pretty", "[]"),
]
# (args, number of uuids); 3.0 counts as an integer in JSON Schema, so the script takes it too.
UUID_CASES: list[tuple[dict[str, Any], int]] = [
    ({}, 1),
    ({"count": 5}, 5),
    ({"count": 100}, 100),
    ({"count": 3.0}, 3),
]
ECHO_ARGS: dict[str, Any] = {"greeting": "hi", "n": 1, "nested": {"list": [1, None, True]}}
DANGER_ARGS: dict[str, Any] = {"target": "everything", "note": "line1\nline2"}

# Bad argument shapes: the script rejects them, and so must the register's inputSchema.
SHAPE_ERRORS: list[tuple[str, dict[str, Any], str]] = [
    ("base64", {"op": "rot13", "text": "x"}, '"op" must be "encode" or "decode"'),
    ("base64", {"text": "x"}, '"op" must be "encode" or "decode"'),
    ("base64", {"op": "encode"}, '"text" is required and must be a string'),
    ("base64", {"op": "decode", "text": 5}, '"text" is required and must be a string'),
    ("base64", {"op": "encode", "text": "x", "extra": 1}, 'unknown argument "extra"; allowed: "op", "text"'),
    ("hash", {"algo": "sha512", "text": "x"}, '"algo" must be "sha256", "sha1" or "md5"'),
    ("hash", {"algo": None, "text": "x"}, '"algo" must be "sha256", "sha1" or "md5"'),
    ("hash", {}, '"text" is required and must be a string'),
    ("hash", {"text": ["x"]}, '"text" is required and must be a string'),
    ("hash", {"text": "x", "salt": "y"}, 'unknown argument "salt"'),
    ("uuid", {"count": 0}, '"count" must be an integer from 1 to 100'),
    ("uuid", {"count": 101}, '"count" must be an integer from 1 to 100'),
    ("uuid", {"count": "3"}, '"count" must be an integer from 1 to 100'),
    ("uuid", {"count": True}, '"count" must be an integer from 1 to 100'),
    ("uuid", {"count": 2.5}, '"count" must be an integer from 1 to 100'),
    ("uuid", {"n": 2}, 'unknown argument "n"; allowed: "count"'),
    ("json", {}, '"text" is required and must be a string'),
    ("json", {"text": "{}", "indent": 11}, '"indent" must be an integer from 0 to 10'),
    ("json", {"text": "{}", "indent": -1}, '"indent" must be an integer from 0 to 10'),
    ("json", {"text": "{}", "indent": "2"}, '"indent" must be an integer from 0 to 10'),
    ("json", {"text": "{}", "indent": False}, '"indent" must be an integer from 0 to 10'),
    ("json", {"text": "{}", "minify": "yes"}, '"minify" must be true or false'),
    ("json", {"text": "{}", "sort": True}, 'unknown argument "sort"'),
    ("text-stats", {}, '"text" is required and must be a string'),
    ("text-stats", {"text": None}, '"text" is required and must be a string'),
    ("text-stats", {"text": "x", "mode": "fast"}, 'unknown argument "mode"; allowed: "text"'),
]
# Well-shaped arguments whose content is wrong: only the script can tell.
CONTENT_ERRORS: list[tuple[str, dict[str, Any], str]] = [
    ("base64", {"op": "decode", "text": "aGk"}, "length 3 (ignoring whitespace) is not a multiple of 4"),
    ("base64", {"op": "decode", "text": "aG-k"}, 'character "-" is not allowed'),
    ("base64", {"op": "decode", "text": "a=Gk"}, '"=" padding may only appear at the end'),
    ("base64", {"op": "decode", "text": "aG==="}, '"=" padding may only appear at the end'),
    ("base64", {"op": "decode", "text": "QR=="}, "not canonical"),
    ("base64", {"op": "decode", "text": "/w=="}, "not valid UTF-8"),
    ("json", {"text": "{bad"}, '"text" is not valid JSON: Expecting property name'),
    ("json", {"text": ""}, '"text" is not valid JSON: Expecting value'),
    ("json", {"text": "[1, NaN]"}, '"text" is not valid JSON: NaN is not a valid JSON value'),
    ("json", {"text": "[1] x"}, '"text" is not valid JSON: Extra data'),
]
BAD_ENVELOPES = [
    ("{not json", "arguments are not valid JSON"),
    ("[1, 2]", "arguments must be a JSON object"),
    ('"text"', "arguments must be a JSON object"),
]

VALID_ARGS: dict[str, list[dict[str, Any]]] = {
    "echo": [ECHO_ARGS, {}],
    "base64": [
        {"op": "encode", "text": "hi"},
        {"op": "decode", "text": "aGk="},
        {"op": "decode", "text": "aGVs\nbG8=\n"},
    ],
    "hash": [{"text": "abc"}, *({"algo": algo, "text": "abc"} for algo in ABC_DIGESTS)],
    "uuid": [args for args, _ in UUID_CASES],
    "json": [args for args, _, _ in JSON_CASES],
    "text-stats": [{"text": text} for text, *_ in TEXT_STATS_CASES],
    "danger": [DANGER_ARGS, {}],
}

LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z danger-tool fired (\{.*\})$")


@dataclass(frozen=True)
class ToolRun:
    returncode: int
    output: dict[str, Any]
    stderr: str


def tool_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("TOOLFUNNEL_")}
    env.update(extra or {})
    return env


def run_script(
    script: str,
    *,
    env_args: str | None,
    stdin: str,
    extra_env: dict[str, str] | None = None,
    cwd: Path = CONFIG_HOME,
) -> ToolRun:
    """Run one script the way the gateway does and check it printed exactly one JSON line."""
    extra = dict(extra_env or {})
    if env_args is not None:
        extra["TOOLFUNNEL_TOOL_ARGS"] = env_args
    proc = subprocess.run(
        [sys.executable, str(SCRIPTS_DIR / script)],
        env=tool_env(extra),
        input=stdin,
        capture_output=True,
        text=True,
        encoding="utf-8",
        cwd=cwd,
        timeout=10,
        check=False,
    )
    assert proc.stdout.endswith("\n") and proc.stdout.count("\n") == 1, proc.stdout
    output = json.loads(proc.stdout)
    assert isinstance(output, dict)
    return ToolRun(proc.returncode, output, proc.stderr)


def run_tool(tool_id: str, args: object, extra_env: dict[str, str] | None = None) -> ToolRun:
    """Deliver args like the gateway: the same JSON in the env var and on stdin."""
    raw = json.dumps(args)
    return run_script(SCRIPT_FOR[tool_id], env_args=raw, stdin=raw, extra_env=extra_env)


def run_ok(tool_id: str, args: object, extra_env: dict[str, str] | None = None) -> dict[str, Any]:
    result = run_tool(tool_id, args, extra_env)
    assert result.returncode == 0, result
    assert result.output["ok"] is True
    return result.output


def assert_failure(result: ToolRun, expected: str) -> None:
    assert result.returncode == 1
    assert result.output == {"ok": False, "error": result.output["error"]}
    assert expected in result.output["error"]
    assert result.stderr.strip() == result.output["error"]


def load_register() -> dict[str, Any]:
    register = json.loads(REGISTER_PATH.read_text(encoding="utf-8"))
    assert isinstance(register, dict)
    return register


def register_entries() -> dict[str, dict[str, Any]]:
    """The demo tools of the seed register (the management tools beside them are tested in
    tests/test_management.py)."""
    return {entry["id"]: entry for entry in load_register()["tools"] if entry.get("category") != "management"}


# --- echo -------------------------------------------------------------------------------------


def test_echo_returns_args_and_empty_argv() -> None:
    """echo returns its argument object unchanged, with argv always []."""
    assert run_ok("echo", ECHO_ARGS) == {"ok": True, "args": ECHO_ARGS, "argv": []}


@pytest.mark.parametrize("raw", ["null", "", "  \n"])
def test_null_or_empty_args_mean_empty_object(raw: str) -> None:
    """A JSON null, or no arguments at all, is treated as {}."""
    result = run_script("echo.py", env_args=raw, stdin="")
    assert (result.returncode, result.output) == (0, {"ok": True, "args": {}, "argv": []})


@pytest.mark.parametrize("tool_id", sorted(SCRIPT_FOR))
def test_args_on_stdin_only(tool_id: str) -> None:
    """Without TOOLFUNNEL_TOOL_ARGS every tool reads its arguments from stdin."""
    args = VALID_ARGS[tool_id][0]
    via_stdin = run_script(SCRIPT_FOR[tool_id], env_args=None, stdin=json.dumps(args))
    via_both = run_ok(tool_id, args)
    assert via_stdin.returncode == 0
    if tool_id == "uuid":  # random output: compare the shape only
        assert set(via_stdin.output) == set(via_both) and len(via_stdin.output["uuids"]) == 1
    else:
        assert via_stdin.output == via_both


def test_env_args_win_over_stdin() -> None:
    """When both carry arguments, the env var is the one used."""
    result = run_script("echo.py", env_args='{"from": "env"}', stdin='{"from": "stdin"}')
    assert result.output["args"] == {"from": "env"}


# --- base64 -----------------------------------------------------------------------------------


def test_base64_encode_known_value() -> None:
    """base64 encode of "hi" is "aGk="."""
    assert run_ok("base64", {"op": "encode", "text": "hi"}) == {"ok": True, "op": "encode", "result": "aGk="}


def test_base64_round_trip_non_ascii() -> None:
    """Encoding then decoding returns the original UTF-8 text."""
    text = "héllo wörld ✓ \U0001f600"
    encoded = run_ok("base64", {"op": "encode", "text": text})["result"]
    assert run_ok("base64", {"op": "decode", "text": encoded}) == {"ok": True, "op": "decode", "result": text}


@pytest.mark.parametrize(("text", "expected"), [("aGVs\nbG8=\n", "hello"), (" aGk= ", "hi"), ("", "")])
def test_base64_decode_ignores_whitespace(text: str, expected: str) -> None:
    """Decoding strips whitespace (line-wrapped base64) before the strict checks."""
    assert run_ok("base64", {"op": "decode", "text": text})["result"] == expected


# --- hash -------------------------------------------------------------------------------------


@pytest.mark.parametrize(("algo", "digest"), sorted(ABC_DIGESTS.items()))
def test_hash_known_digests(algo: str, digest: str) -> None:
    """hash returns the standard hex digest of "abc" for each algorithm."""
    assert run_ok("hash", {"algo": algo, "text": "abc"}) == {"ok": True, "algo": algo, "hexdigest": digest}


def test_hash_defaults_to_sha256_of_utf8() -> None:
    """Without algo, hash is sha256 over the text's UTF-8 bytes."""
    expected = hashlib.sha256("é✓".encode()).hexdigest()
    assert run_ok("hash", {"text": "é✓"}) == {"ok": True, "algo": "sha256", "hexdigest": expected}


# --- uuid -------------------------------------------------------------------------------------


@pytest.mark.parametrize(("args", "count"), UUID_CASES)
def test_uuid_generates_distinct_v4(args: dict[str, Any], count: int) -> None:
    """uuid returns count distinct canonical version-4 UUIDs (default 1)."""
    output = run_ok("uuid", args)
    assert set(output) == {"ok", "uuids"}
    uuids = output["uuids"]
    assert len(uuids) == count == len(set(uuids))
    assert all(uuid.UUID(value).version == 4 and str(uuid.UUID(value)) == value for value in uuids)


# --- json -------------------------------------------------------------------------------------


@pytest.mark.parametrize(("args", "key", "expected"), JSON_CASES)
def test_json_formats_exactly(args: dict[str, Any], key: str, expected: str) -> None:
    """json pretty-prints like JSON.stringify(v, null, indent), or minifies when asked."""
    assert run_ok("json", args) == {"ok": True, key: expected}


# --- text-stats -------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "chars", "words", "lines", "size"), TEXT_STATS_CASES)
def test_text_stats_counts(text: str, chars: int, words: int, lines: int, size: int) -> None:
    """text-stats counts chars, words, lines (CRLF = LF, no extra trailing line) and UTF-8 bytes."""
    expected = {"ok": True, "chars": chars, "words": words, "lines": lines, "bytes": size}
    assert run_ok("text-stats", {"text": text}) == expected


# --- danger -----------------------------------------------------------------------------------


def test_danger_appends_one_line(tmp_path: Path) -> None:
    """danger creates TOOLFUNNEL_DANGER_LOG and appends exactly one timestamped line per run."""
    log = tmp_path / "danger.log"
    output = run_ok("danger", DANGER_ARGS, {"TOOLFUNNEL_DANGER_LOG": str(log)})
    assert output == {"ok": True, "fired": True, "wrote": True, "logPath": str(log)}
    content = log.read_text(encoding="utf-8")
    assert content.endswith("\n") and content.count("\n") == 1
    match = LOG_LINE.match(content.rstrip("\n"))
    assert match is not None, content
    assert json.loads(match.group(1)) == {"args": DANGER_ARGS, "argv": []}

    run_ok("danger", {}, {"TOOLFUNNEL_DANGER_LOG": str(log)})
    assert log.read_text(encoding="utf-8").startswith(content)
    assert log.read_text(encoding="utf-8").count("\n") == 2


@pytest.mark.parametrize("log_env", [{}, {"TOOLFUNNEL_DANGER_LOG": ""}], ids=["unset", "empty"])
def test_danger_without_log_writes_nothing(tmp_path: Path, log_env: dict[str, str]) -> None:
    """With TOOLFUNNEL_DANGER_LOG unset or empty, danger still fires but writes no file."""
    args = json.dumps(DANGER_ARGS)
    result = run_script("danger.py", env_args=args, stdin="", extra_env=log_env, cwd=tmp_path)
    assert result.returncode == 0
    assert result.output == {"ok": True, "fired": True, "wrote": False, "logPath": None}
    assert list(tmp_path.iterdir()) == []


def test_danger_unwritable_log_fails(tmp_path: Path) -> None:
    """An unwritable TOOLFUNNEL_DANGER_LOG is a failure naming the variable, not a silent skip."""
    log = tmp_path / "missing-dir" / "danger.log"
    result = run_tool("danger", {}, {"TOOLFUNNEL_DANGER_LOG": str(log)})
    assert_failure(result, "cannot append to TOOLFUNNEL_DANGER_LOG file")


# --- failures ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("tool_id", "args", "expected"), SHAPE_ERRORS + CONTENT_ERRORS)
def test_bad_arguments_fail_naming_the_argument(tool_id: str, args: dict[str, Any], expected: str) -> None:
    """A bad argument exits 1 with {"ok": false, "error"} naming it, and the message on stderr."""
    assert_failure(run_tool(tool_id, args), expected)


@pytest.mark.parametrize(("raw", "expected"), BAD_ENVELOPES)
@pytest.mark.parametrize("tool_id", sorted(SCRIPT_FOR))
def test_bad_envelope_fails(tool_id: str, raw: str, expected: str) -> None:
    """Arguments that are not JSON, or not a JSON object, fail in every tool."""
    assert_failure(run_script(SCRIPT_FOR[tool_id], env_args=raw, stdin=raw), expected)


def test_lone_surrogate_text_fails() -> None:
    """Text that cannot be UTF-8 encoded is rejected, naming "text"."""
    args = '{"text": "\\ud800"}'
    assert_failure(run_script("hash_tool.py", env_args=args, stdin=""), '"text" contains a lone surrogate')


# --- register ---------------------------------------------------------------------------------


def test_register_declares_the_seven_tools() -> None:
    """The register lists exactly the seven demo tools (besides the management tools), each a
    gateway script that exists."""
    register = load_register()
    assert register["version"] == 1 and register["description"]
    entries = register_entries()
    assert list(entries) == list(SCRIPT_FOR)
    for tool_id, entry in entries.items():
        assert set(entry) >= ENTRY_KEYS
        assert entry["mode"] == "gateway"
        assert entry["invoke"] == {"type": "script", "path": f"tools/scripts/{SCRIPT_FOR[tool_id]}"}
        assert (CONFIG_HOME / entry["invoke"]["path"]).is_file()


@pytest.mark.parametrize("tool_id", list(SCRIPT_FOR))
def test_register_schema_is_valid_and_accepts_examples(tool_id: str) -> None:
    """Each inputSchema is valid 2020-12, closed unless open by design, and accepts the tested args."""
    schema = register_entries()[tool_id]["inputSchema"]
    Draft202012Validator.check_schema(schema)
    assert schema["type"] == "object"
    assert ("additionalProperties" not in schema) == (tool_id in OPEN_SCHEMA_TOOLS)
    validator = Draft202012Validator(schema)
    for args in VALID_ARGS[tool_id]:
        assert validator.is_valid(args), args
    for error_tool, args, _ in CONTENT_ERRORS:
        if error_tool == tool_id:
            assert validator.is_valid(args), args


@pytest.mark.parametrize(("tool_id", "args", "expected"), SHAPE_ERRORS)
def test_register_schema_rejects_what_the_script_rejects(
    tool_id: str, args: dict[str, Any], expected: str
) -> None:
    """The inputSchema refuses every argument shape the script refuses."""
    schema = register_entries()[tool_id]["inputSchema"]
    assert not Draft202012Validator(schema).is_valid(args), expected


@pytest.mark.parametrize("tool_id", list(SCRIPT_FOR))
def test_register_instructions_example_runs(tool_id: str) -> None:
    """The toolfunnel_run_tool example in each tool's instructions names it, fits its schema and runs."""
    entry = register_entries()[tool_id]
    match = re.search(r"`toolfunnel_run_tool` with `(\{.*\})`", entry["instructions"])
    assert match is not None
    example = json.loads(match.group(1))
    assert example["name"] == tool_id
    assert Draft202012Validator(entry["inputSchema"]).is_valid(example["args"])
    run_ok(tool_id, example["args"])


@pytest.mark.parametrize("script", sorted(SCRIPT_FOR.values()))
def test_scripts_are_standalone(script: str) -> None:
    """Scripts have no shebang, import nothing from tfunnel and shadow no stdlib module."""
    source = (SCRIPTS_DIR / script).read_text(encoding="utf-8")
    assert not source.startswith("#!")
    assert not re.search(r"^\s*(from|import)\s+tfunnel\b", source, re.MULTILINE)
    assert Path(script).stem not in sys.stdlib_module_names
