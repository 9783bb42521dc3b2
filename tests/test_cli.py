"""The `tfunnel` command line, run in-process (`tfunnel.testing.cli`): what it prints, its exit
status, what it writes."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tfunnel.testing.cli import run

pytestmark = pytest.mark.timeout(60)


def tfunnel(home: Path, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return run(home, *args, stdin=stdin)


def break_register(home: Path) -> None:
    path = home / "tools" / "tools.register.json"
    register = json.loads(path.read_text())
    register["tools"][2]["name"] = 5
    register["tools"][3]["timeoutS"] = "soon"
    path.write_text(json.dumps(register))


EXPECTED_PROBLEMS = [
    "tools/tools.register.json: tools[2] (id 'hash'): field 'name': must be a non-empty string, got 5",
    "tools/tools.register.json: tools[3] (id 'uuid'): field 'timeoutS': must be a positive number, "
    'got "soon"',
]


def test_check_names_file_entry_and_field(home: Path) -> None:
    """`tfunnel check` prints every problem (file, entry, field) and exits 1."""
    break_register(home)
    done = tfunnel(home, "check")
    assert done.returncode == 1
    for problem in EXPECTED_PROBLEMS:
        assert problem in done.stdout
    assert "2 problem(s)" in done.stdout


def test_check_passes_on_the_seeded_home(home: Path) -> None:
    """The bundled home has no problems."""
    done = tfunnel(home, "check")
    assert done.returncode == 0, done.stdout
    assert done.stdout.startswith("ok: ")


def test_serve_refuses_to_start_with_the_same_message(home: Path) -> None:
    """The gateway refuses a bad home at start (exit 1), naming the same problems on stderr."""
    break_register(home)
    done = tfunnel(home, "serve")
    assert done.returncode == 1
    assert done.stdout == ""
    for problem in EXPECTED_PROBLEMS:
        assert problem in done.stderr


def test_start_line_names_the_home_and_seeding(tmp_path: Path) -> None:
    """Every start prints one stderr line naming the resolved home and whether it was seeded."""
    home = tmp_path / "fresh"
    first = tfunnel(home, "check")
    assert f"tfunnel: config home {home} (seeded from the bundled defaults; from --home)" in first.stderr
    assert (home / "tools" / "tools.register.json").exists()
    assert not (home / "tools" / "tools.state.json").exists()
    assert not (home / "systemd").exists()
    second = tfunnel(home, "check")
    assert f"tfunnel: config home {home} (existing; from --home)" in second.stderr


def test_global_options_work_after_the_subcommand(home: Path) -> None:
    """`--home` may come after the subcommand too."""
    done = run(None, "check", "--home", str(home))
    assert done.returncode == 0 and str(home) in done.stdout


def test_call_prints_the_result_and_sets_the_status(home: Path) -> None:
    """`tfunnel call` runs a tool through the surface: 0 on success, 1 on a tool error, 2 on bad JSON."""
    ok = tfunnel(home, "call", "hash", '{"text": "abc"}')
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["hexdigest"].startswith("ba7816bf")
    meta = tfunnel(home, "call", "toolfunnel_list_tools", '{"category": "crypto"}')
    assert json.loads(meta.stdout) == {"tools": [{"id": "hash", "name": "Hash", "category": "crypto",
                                                  "summary": json.loads(meta.stdout)["tools"][0]["summary"]}]}
    failed = tfunnel(home, "call", "hash", "{}")
    assert failed.returncode == 1 and "'text'" in failed.stdout
    bad = tfunnel(home, "call", "hash", "{nope")
    assert bad.returncode == 2 and "JSON" in bad.stderr


def test_tool_visibility_commands_write_the_state_file(home: Path) -> None:
    """`tfunnel tool ...` merges one axis into tools.state.json; `tfunnel tools` shows it."""
    assert tfunnel(home, "tool", "hot", "hash").returncode == 0
    assert tfunnel(home, "tool", "disable", "hash").returncode == 0
    assert tfunnel(home, "tool", "unhot", "toolfunnel_howto").returncode == 0
    state = json.loads((home / "tools" / "tools.state.json").read_text())
    assert state == {"hash": {"hot": True, "enabled": False}, "toolfunnel_howto": {"hot": False}}
    listing = tfunnel(home, "tools").stdout.splitlines()
    row = next(line for line in listing if line.startswith("hash "))
    assert row.split()[1:5] == ["local", "no", "yes", "no"]
    unknown = tfunnel(home, "tool", "hot", "nope")
    assert unknown.returncode == 1 and "nope" in unknown.stderr


@pytest.mark.parametrize(("action", "name", "near"), [
    ("hot", "hsh", "'hash'"),
    ("enable", "toolfunnel_run", "'toolfunnel_run_tool'"),
    ("hide", "text_stats", "'text-stats'"),
    ("disable", "zzzzqqq", "`tfunnel tools` lists them"),
])
def test_tool_command_refuses_an_unknown_name_with_near_matches(home: Path, action: str, name: str,
                                                                  near: str) -> None:
    """`tfunnel tool ACTION NAME` of a name that does not exist is refused (exit 1), naming the
    near matches, and writes nothing."""
    done = tfunnel(home, "tool", action, name)
    assert done.returncode == 1
    [line] = [line for line in done.stderr.splitlines() if line.startswith("tfunnel tool:")]
    assert repr(name) in line and near in line
    assert not (home / "tools" / "tools.state.json").exists()


def test_tool_command_checks_upstream_tool_names_by_asking_the_upstream(home: Path) -> None:
    """An upstream tool's name is checked by starting its upstream: a typo is refused with the
    near matches (nothing written), a real name is written; --force writes without asking."""
    typo = tfunnel(home, "tool", "disable", "demo_pnig")
    assert typo.returncode == 1 and "did you mean 'demo_ping'" in typo.stderr
    assert not (home / "tools" / "tools.state.json").exists()
    assert tfunnel(home, "tool", "disable", "demo_ping").returncode == 0
    assert tfunnel(home, "tool", "hot", "demo_later", "--force").returncode == 0
    state = json.loads((home / "tools" / "tools.state.json").read_text())
    assert state == {"demo_ping": {"enabled": False}, "demo_later": {"hot": True}}


def test_usage_errors_exit_2(home: Path) -> None:
    """An unknown command or option is a usage error (exit 2)."""
    assert tfunnel(home, "frobnicate").returncode == 2
    assert tfunnel(home, "tool", "explode", "hash").returncode == 2


@pytest.mark.parametrize(
    ("option", "value", "allowed"),
    [
        ("--port", "65536", "0 to 65535"),
        ("--port", "99999", "0 to 65535"),
        ("--port", "-1", "0 to 65535"),
        ("--port", "nine", "0 to 65535"),
        ("--grace", "-1", "finite number of seconds >= 0"),
        ("--grace", "-0.5", "finite number of seconds >= 0"),
        ("--grace", "nan", "finite number of seconds >= 0"),
        ("--grace", "inf", "finite number of seconds >= 0"),
        ("--grace", "soon", "finite number of seconds >= 0"),
    ],
)
def test_serve_option_out_of_range_is_a_usage_error(home: Path, option: str, value: str,
                                                    allowed: str) -> None:
    """A bad --port or --grace exits 2 with one error line naming the option and what is allowed."""
    other = ("--port", "0") if option == "--grace" else ()  # never the default port, even if it serves
    done = tfunnel(home, "serve", "--http", f"{option}={value}", *other)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    errors = [line for line in done.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1 and errors[0].startswith(f"tfunnel serve: error: argument {option}: must be ")
    assert allowed in errors[0] and repr(value) in errors[0]


def test_mcp_list_probe_shows_live_upstream_state(home: Path) -> None:
    """`tfunnel mcp list --probe` connects the seeded demo upstream and reports it ready."""
    done = tfunnel(home, "mcp", "list", "--probe")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("demo  ready  tools=5  protocol=2025-11-25  restarts=0")


def test_check_runs_the_isolation_guard(home: Path) -> None:
    """`tfunnel check` reports an upstream the isolation guard would refuse, naming the entry."""
    (home / "mcp" / "expose.json").write_text(json.dumps({"version": 1, "upstreams": [
        {"id": "escapes", "command": "python3", "args": ["/etc/passwd"]}], "expose": []}))
    done = tfunnel(home, "check")
    assert done.returncode == 1
    assert "mcp/expose.json: upstreams[0] (id 'escapes'): isolation guard:" in done.stdout
