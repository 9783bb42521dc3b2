"""`tfunnel pack`, run as a real process: the home copy serves the same tools; the python project
builds into a wheel that installs in a fresh venv and serves over stdio to the SDK client."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import tomllib
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import trio
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.types import TextContent

from tests.conftest import add_tools
from tests.wire import gateway_argv

pytestmark = pytest.mark.timeout(240)

ROOT = Path(__file__).resolve().parents[2]
GREET = {"id": "greet", "name": "Greet", "summary": "Greets from the packed home.", "category": "pack",
         "inputSchema": {"type": "object", "properties": {"who": {"type": "string"}}},
         "invoke": {"type": "script", "path": "tools/scripts/greet.py"}}
GREET_PY = """import sys
from _tool_io import main

if __name__ == "__main__":
    sys.exit(main(lambda args: {"ok": True, "greeting": f"hello {args.get('who', 'you')} from the pack"}))
"""


def tfunnel(home: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(gateway_argv(home, *args), capture_output=True, text=True, timeout=60, env=env)


def run(*argv: str | Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{argv}: {done.stdout}\n{done.stderr}"
    return done


def messy_home(home: Path) -> None:
    """A home with the greet tool and everything a copy must leave out."""
    (home / "tools" / "scripts" / "greet.py").write_text(GREET_PY)
    add_tools(home, GREET)
    for rel in ("logs/toolfunnel.log.jsonl", "auth/tokens.json", "tools/scripts/greet.py~",
                "tools/scripts/.greet.py.swp", "tools/.tools.state.json.1.ab.tfunnel-tmp",
                "mcp/tool-approvals.json", "tools/scripts/__pycache__/x.pyc", "hooks/.git/HEAD",
                "notes.txt"):
        (home / rel).parent.mkdir(parents=True, exist_ok=True)
        (home / rel).write_text("x")
    # The approvals file is read at every start (a broken one refuses it): a valid, empty one.
    (home / "mcp" / "tool-approvals.json").write_text('{"version": 1, "upstreams": {}}')
    (home / "tools" / "scripts" / "outside").symlink_to("/etc/hostname")
    (home / "tools" / "scripts" / "inside.json").symlink_to(home / "mcp" / "expose.json")
    (home / "tools" / "scripts" / "to-logs").symlink_to(home / "logs")


def tool_ids(home: Path) -> list[str]:
    done = tfunnel(home, "call", "toolfunnel_list_tools", "{}")
    assert done.returncode == 0, done.stderr
    return [t["id"] for t in json.loads(done.stdout)["tools"]]


def test_home_format_copies_what_serves_and_nothing_machine_local(home: Path, tmp_path: Path) -> None:
    messy_home(home)
    assert tfunnel(home, "log", "on").returncode == 0
    copy = tmp_path / "copy"
    done = tfunnel(home, "pack", "--out", str(copy), "--name", "Team Tools", "--version", "2.0", "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["ok"] is True and result["format"] == "home" and result["out"] == str(copy)
    files = sorted(str(p.relative_to(copy)) for p in copy.rglob("*") if p.is_file())
    assert result["files"] == len(files)
    assert result["next"] == [f"tfunnel --home {copy} check", f"tfunnel --home {copy} serve"]
    assert result["warnings"] == ["tools/scripts/outside: a symlink that leads outside the home; not copied",
                                  "tools/scripts/to-logs: a symlink to a part of the home a copy leaves out; "
                                  "not copied"]
    assert "warning: tools/scripts/outside" in done.stderr
    assert "tools/scripts/greet.py" in files and "tools/scripts/inside.json" in files
    assert not (copy / "tools" / "scripts" / "inside.json").is_symlink()
    for left_out in ("logs", "auth", "notes.txt", "mcp/tool-approvals.json", "tools/scripts/__pycache__",
                     "hooks/.git", "tools/scripts/outside", "tools/scripts/to-logs"):
        assert not os.path.lexists(copy / left_out), left_out
    assert not [f for f in files if f.endswith(("~", ".swp", ".tfunnel-tmp")) or "/." in f]
    settings = json.loads((copy / "toolfunnel.json").read_text())
    assert (settings["serverName"], settings["serverVersion"]) == ("team-tools", "2.0")
    assert settings["limits"] == json.loads((home / "toolfunnel.json").read_text())["limits"]
    checked = tfunnel(copy, "check")
    assert checked.returncode == 0, checked.stdout
    assert tool_ids(copy) == tool_ids(home)
    records = [json.loads(line) for line in (home / "logs" / "toolfunnel.log.jsonl").read_text().splitlines()
               if line.startswith("{")]
    configs = [r for r in records if r.get("type") == "config"]  # (listing the tools pins the demo's)
    assert {"type": "config", "via": "cli", "file": str(copy), "change": "pack home"}.items() <= \
        configs[-1].items()
    again = tfunnel(home, "pack", "--out", str(copy), "--approvals", "--force")
    assert again.returncode == 0, again.stderr
    assert (copy / "mcp" / "tool-approvals.json").exists()
    assert again.stdout.startswith(f"packed {result['files'] + 1} file(s) as home into {copy}")


def test_default_destination_is_dist_under_the_home(home: Path) -> None:
    done = tfunnel(home, "pack", "--json")
    assert done.returncode == 0, done.stderr
    out = home / "dist" / "tfunnel"
    assert json.loads(done.stdout)["out"] == str(out)
    assert (out / "tools" / "tools.register.json").is_file() and not (out / "dist").exists()


@pytest.mark.parametrize(("args", "status", "message"), [
    (("--format", "npm"), 2, "argument --format: invalid choice: 'npm'"),
    (("--format", "python", "--name", "x", "--version", "latest"), 1,
     "tfunnel pack: version: must be a PEP 440 version"),
    (("--format", "python"), 1, "tfunnel pack: name: is tfunnel's own project name"),
    (("--out", "{home}/tools/copy"), 1, "tfunnel pack: out: refused: "),
    (("--out", "{home}"), 1, "is the home itself"),
    (("--out", "{full}"), 1, "is not empty; pass --force"),
    (("--description", "a\x07b", "--format", "python", "--name", "x"), 1, "tfunnel pack: description: "),
    (("--format", "python", "--name", "JSON"), 1, "tfunnel pack: name: gives the package 'json', which is"),
    (("--out", "{full}/keep.txt/sub"), 1, "tfunnel pack: out: cannot write "),
])
def test_refusals(home: Path, tmp_path: Path, args: tuple[str, ...], status: int, message: str) -> None:
    full = tmp_path / "full"
    full.mkdir()
    (full / "keep.txt").write_text("mine")
    argv = [a.format(home=home, full=full) for a in args]
    done = tfunnel(home, "pack", *argv)
    assert done.returncode == status
    assert message in done.stderr, done.stderr
    assert done.stdout == ""
    assert not (home / "tools" / "copy").exists()
    assert [p.name for p in full.iterdir()] == ["keep.txt"]


def test_python_project_installs_in_a_fresh_venv_and_serves_stdio(home: Path, tmp_path: Path) -> None:
    """Pack, build both wheels, install them into a fresh venv (the pack's wheel offline, so it
    needs nothing but tfunnel), and talk to the console script with the SDK client."""
    started = time.monotonic()
    (home / "tools" / "scripts" / "greet.py").write_text(GREET_PY)
    add_tools(home, GREET)
    project = tmp_path / "project"
    done = tfunnel(home, "pack", "--format", "python", "--name", "Greeter Tools", "--version", "1.2.0rc1",
                   "--out", str(project), "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["next"][:3] == [f"pip install {project}", "greeter-tools    # serves stdio",
                                  "greeter-tools serve --http"]
    meta = tomllib.loads((project / "pyproject.toml").read_text())
    assert meta["project"]["name"] == "greeter-tools" and meta["project"]["version"] == "1.2.0rc1"
    assert meta["project"]["dependencies"] == ["tfunnel>=0.1.0"]
    assert meta["project"]["scripts"] == {"greeter-tools": "greeter_tools.__main__:main"}
    assert "GREETER_TOOLS_HOME" in (project / "README.md").read_text()
    wheels = tmp_path / "wheels"
    run(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", wheels, project)
    run(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", wheels, ROOT)
    [packed] = wheels.glob("greeter_tools-1.2.0rc1-*.whl")
    [ours] = wheels.glob("tfunnel-*.whl")
    assert f"pip install {packed.name}" in (project / "README.md").read_text()
    # A fresh venv without a pip of its own (ensurepip is most of a venv's making): this pip
    # installs into it (`pip --python`), resolving tfunnel's dependencies from the index.
    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", "--without-pip", venv)
    pip = (sys.executable, "-m", "pip", "--python", venv / "bin" / "python")
    run(*pip, "install", "-q", ours)
    run(*pip, "install", "-q", "--no-index", packed)
    run(*pip, "check")
    installed = time.monotonic() - started
    data = tmp_path / "data"
    env = {"PATH": os.environ.get("PATH", ""), "XDG_DATA_HOME": str(data), "HOME": str(tmp_path)}
    script = venv / "bin" / "greeter-tools"
    trio.run(_serve_and_call, script, env)
    served = data / "greeter-tools" / "home"
    assert json.loads((served / "toolfunnel.json").read_text())["serverName"] == "greeter-tools"
    checked = subprocess.run([script, "check"], capture_output=True, text=True, timeout=60, env=env)
    assert checked.returncode == 0 and checked.stdout.startswith(f"ok: {served}"), checked.stdout
    other = tmp_path / "other-home"
    chosen = subprocess.run([script, "tools"], capture_output=True, text=True, timeout=60,
                            env={**env, "GREETER_TOOLS_HOME": str(other)})
    assert chosen.returncode == 0 and "greet" in chosen.stdout
    assert (other / "tools" / "scripts" / "greet.py").is_file()
    given = subprocess.run([script, "--home", str(tmp_path / "given"), "check"], capture_output=True,
                           text=True, timeout=60, env={**env, "XDG_DATA_HOME": str(tmp_path / "unused")})
    assert given.returncode == 0 and f"config home {tmp_path / 'given'} (seeded" in given.stderr
    assert not (tmp_path / "unused").exists()  # an explicit --home is served as it is: nothing copied
    _serves_http(script, env, tmp_path / "http.err")
    # Reported, not asserted: how long installs take is the machine's, not the code's.
    print(f"pack + two wheels + fresh venv + installs: {installed:.1f} s; "
          f"total {time.monotonic() - started:.1f} s", file=sys.stderr)


def _serves_http(script: Path, env: dict[str, str], errlog: Path) -> None:
    """`NAME --http --port 0` is `NAME serve --http --port 0`: it listens and answers /livez."""
    with open(errlog, "wb") as err:
        proc = subprocess.Popen([script, "--http", "--port", "0"], stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=err, env=env)
    try:
        deadline = time.monotonic() + 30
        urls: list[str] = []
        while not urls and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
            for line in errlog.read_text().splitlines():
                if line.startswith("{") and json.loads(line).get("event") == "listening":
                    urls = json.loads(line)["urls"]
        assert urls, errlog.read_text()
        with urllib.request.urlopen(f"{urls[0]}/livez", timeout=10) as answer:
            assert (answer.status, answer.read()) == (200, b"ok")
    finally:
        proc.terminate()
        proc.wait(timeout=30)


async def _serve_and_call(script: Path, env: dict[str, str]) -> None:
    params = StdioServerParameters(command=str(script), env=env)
    with tempfile.TemporaryFile("w+b") as errlog, trio.fail_after(60):
        try:
            async with Client(stdio_client(params, errlog=errlog), cache=None) as client:  # type: ignore[arg-type]
                names = [t.name for t in (await client.list_tools()).tools]
                assert "toolfunnel_run_tool" in names
                listed = await client.call_tool("toolfunnel_list_tools", {"category": "pack"})
                assert [t["id"] for t in _payload(listed)] == ["greet"]
                ran = await client.call_tool("toolfunnel_run_tool", {"name": "greet", "args": {"who": "sdk"}})
                assert _payload(ran)["greeting"] == "hello sdk from the pack"
        finally:
            errlog.seek(0)
            sys.stderr.write(errlog.read().decode("utf-8", "replace"))


def _payload(result: Any) -> Any:
    assert not result.is_error, result.content
    block = result.content[0]
    assert isinstance(block, TextContent)
    return json.loads(block.text)


def test_the_shared_requeststate_key_never_goes_into_a_copy(home: Path, tmp_path: Path) -> None:
    """A key file kept inside a copied folder (mcp/), and its rotated-out predecessor, stay home:
    the copy makes a key of its own at its first start."""
    settings = json.loads((home / "toolfunnel.json").read_text())
    (home / "toolfunnel.json").write_text(json.dumps({**settings, "stateKeyFile": "mcp/state.key"}))
    for name in ("state.key", "state.key.previous"):
        (home / "mcp" / name).write_bytes(os.urandom(32))
        (home / "mcp" / name).chmod(0o600)
    copy = tmp_path / "copy"
    done = tfunnel(home, "pack", "--out", str(copy), "--json")
    assert done.returncode == 0, done.stderr
    warnings = json.loads(done.stdout)["warnings"]
    for name in ("state.key", "state.key.previous"):
        assert not (copy / "mcp" / name).exists()
        assert f"mcp/{name}: the requestState key of toolfunnel.json stateKeyFile, a secret of this " \
               "deployment; not copied" in warnings
    assert json.loads((copy / "toolfunnel.json").read_text())["stateKeyFile"] == "mcp/state.key"
    assert tfunnel(copy, "check").returncode == 0
