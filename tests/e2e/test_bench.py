"""The bench itself: the fast upstream answers over a real pipe, and `bench/run.py --quick` (both
upstreams, the HTTP face and the scale table in their quick form) completes and reports every
part. No wall-clock thresholds: only that the numbers exist and the verdicts follow from them."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
FAST_UPSTREAM = ROOT / "bench" / "fast_upstream.mjs"
QUICK_TIMEOUT_S = 150.0


def _exchange(argv: list[str], messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Write `messages` as NDJSON to a fresh process, close its stdin, read every answer line."""
    lines = "".join(json.dumps(m) + "\n" for m in messages)
    done = subprocess.run(argv, input=lines.encode(), capture_output=True, timeout=30, check=True)
    return [json.loads(line) for line in done.stdout.splitlines() if line.strip()]


def _call(name: str, text: str) -> dict[str, Any]:
    return {"name": name, "arguments": {"text": text}}


def test_fast_upstream_answers_initialize_list_and_echo() -> None:
    """initialize, tools/list with --tools N tools, echo's text back, -32601 for server/discover."""
    hello = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
    answers = _exchange(["node", str(FAST_UPSTREAM), "--tools", "7"], [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": hello},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
        {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": _call("echo", "hi")},
        {"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": _call("tool_7", "x")},
        {"jsonrpc": "2.0", "id": 5, "method": "server/discover", "params": {}},
    ])
    by_id = {a["id"]: a for a in answers}
    assert set(by_id) == {1, 2, 3, 4, 5}
    assert by_id[1]["result"]["protocolVersion"] == "2025-06-18"
    names = [t["name"] for t in by_id[2]["result"]["tools"]]
    assert names == ["echo", "slow", "tool_3", "tool_4", "tool_5", "tool_6", "tool_7"]
    assert by_id[3]["result"]["content"] == [{"type": "text", "text": "hi"}]
    assert by_id[4]["result"]["content"] == [{"type": "text", "text": "x"}]
    assert by_id[5]["error"]["code"] == -32601


def _processes_with(marker: str) -> list[int]:
    """Live processes whose environment carries `marker` (our run's children, if any are left)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if marker.encode() in (entry / "environ").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


@pytest.mark.timeout(QUICK_TIMEOUT_S + 30)
def test_quick_run_reports_both_upstreams_http_and_scale(tmp_path: Path) -> None:
    """`run.py --quick` exits 0, prints every table, writes the JSON keys for both upstreams, the
    HTTP face's three targets and the scale rows, and leaves no process behind."""
    marker = f"TFUNNEL_BENCH_TEST={uuid.uuid4().hex}"
    key, value = marker.split("=")
    out = tmp_path / "quick.json"
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "run.py"), "--quick", "--json", str(out)],
                          capture_output=True, text=True, timeout=QUICK_TIMEOUT_S,
                          env={**os.environ, "PYTHONPATH": str(ROOT), key: value})
    assert done.returncode == 0, done.stderr[-3000:]
    assert _processes_with(marker) == []
    for heading in ("## fast upstream", "## python upstream", "## HTTP face", "Scale:", "Issue 18's targets"):
        assert heading in done.stdout
    report = json.loads(out.read_text())
    stdio_targets = {"direct", "relay", "tfunnel/curated", "tfunnel/run_tool"}
    assert set(report["results"]) == {"fast", "python"}
    for rounds in report["results"].values():
        assert len(rounds) == 1 and set(rounds[0]) == stdio_targets
        for sample in rounds[0].values():
            assert sample["p50_us"] > 0 and sample["throughput"] > 0 and sample["cold_start_s"] > 0
            assert sample["cpu_us_per_call"] >= 0 and sample["rss_kib"] > 0
    (face,) = report["http"]
    assert set(face["legs"]) == {"http/relay", "http/legacy", "http/modern"}
    for name, health in face["health"].items():
        assert health["failed_calls"] == 0, (name, health["failure_examples"])
    assert [(row["upstreams"], row["tools"]) for row in report["scale"]] == [(1, 10), (3, 20)]
    assert [row["listed"] for row in report["scale"]] == [10, 60]
    verdicts = report["targets"]
    assert {v["area"] for v in verdicts} == {"stdio", "HTTP", "scale"}
    for v in verdicts:
        assert v["met"] == (v["median"] <= v["limit"] if v["at_most"] else v["median"] >= v["limit"])


def test_the_nginx_bench_quick_run_measures_every_target(tmp_path: Path) -> None:
    """`nginx_bench.py --quick` (three instances, nginx over 1, 2 and 3 of them; wrk when it is
    installed, as scripts/test does) exits 0 with every call answered, reports each target's
    latency, rate and, under wrk, the CPU of each party, and leaves no process behind."""
    from tests.nginx import nginx_binary

    nginx_binary()  # skips, naming why, without nginx
    marker = f"TFUNNEL_BENCH_TEST={uuid.uuid4().hex}"
    key, value = marker.split("=")
    out = tmp_path / "nginx.json"
    argv = [sys.executable, str(ROOT / "bench" / "nginx_bench.py"), "--quick", "--json", str(out)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=QUICK_TIMEOUT_S,
                          env={**os.environ, "PYTHONPATH": str(ROOT), key: value})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert _processes_with(marker) == []
    rows = {row["target"]: row for row in json.loads(out.read_text())["rows"]}
    assert set(rows) == {"direct", "nginx/1", "nginx/2", "nginx/3"}
    for row in rows.values():
        assert row["failed"] == 0 and row["p50_us"] > 0 and row["calls_per_s"] > 0
        if shutil.which("wrk"):
            assert row["cores"]["tfunnel"] > 0 and (row["cores"]["nginx"] > 0) is (row["target"] != "direct")


@pytest.mark.timeout(QUICK_TIMEOUT_S + 30)
def test_the_wrk_http_bench_quick_run_measures_every_server(tmp_path: Path) -> None:
    """`http_wrk.py --quick --before <this tree>` (wrk, which scripts/test installs) exits 0 with
    every answer checked and none failed, reports each server's rate, latency and CPU per call,
    and leaves no process behind."""
    assert shutil.which("wrk"), "wrk is needed (Debian package wrk; scripts/test installs it)"
    marker = f"TFUNNEL_BENCH_TEST={uuid.uuid4().hex}"
    key, value = marker.split("=")
    out = tmp_path / "wrk.json"
    argv = [sys.executable, str(ROOT / "bench" / "http_wrk.py"), "--quick", "--before", str(ROOT),
            "--json", str(out)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=QUICK_TIMEOUT_S,
                          env={**os.environ, key: value})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert _processes_with(marker) == []
    results = json.loads(out.read_text())
    assert set(results) == {"http/relay", "http/legacy", "http/modern", "before/legacy", "before/modern"}
    for name, rounds in results.items():
        assert rounds["failed"] == 0, name
        assert rounds["rate"][0] > 0 and rounds["p50_us"][0] > 0 and rounds["cpu_us"][0] > 0, name
    assert "server CPU per call (µs) / relay" in done.stdout
