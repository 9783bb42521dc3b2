"""Token telemetry: the counters, the queue, the per-profile and per-session figures, and found vs
direct calls and searches without a call (observe/tokens.py, observe/telemetry.py)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trio

from tfunnel.approvals.book import Book, Pin, Record
from tfunnel.approvals.store import write
from tfunnel.config.load import load_settings
from tfunnel.config.model import Register, ToolEntry, ToolState, Visibility
from tfunnel.errors import ConfigError
from tfunnel.manage.tokens_cmd import offline_catalog, token_rows
from tfunnel.observe.telemetry import Telemetry
from tfunnel.observe.tokens import Counter, dumps, estimate
from tfunnel.surface import meta
from tfunnel.surface.catalog import Catalog
from tfunnel.surface.full import full_top_level
from tfunnel.surface.upstream_tools import UpstreamTool
from tfunnel.testing.cli import run

SAMPLE = dumps({"name": "git_log", "description": "Show the commit log of a repository, newest first.",
                "inputSchema": {"type": "object", "properties": {"repo_path": {"type": "string"},
                                                                  "max_count": {"type": "integer"}},
                                "required": ["repo_path"]}})


@pytest.mark.parametrize(("text", "tokens"), [("", 0), ("a", 1), ("abcd", 1), ("abcde", 2),
                                               ("é", 1), ("ééé", 2), ("x" * 400, 100)])
def test_the_estimate_is_utf8_bytes_over_four_rounded_up(text: str, tokens: int) -> None:
    """`estimate` is ceil(UTF-8 bytes / 4) (é is two bytes)."""
    assert estimate(text) == tokens
    assert Counter("estimate").count(text) == tokens


@pytest.mark.parametrize("encoding", ["cl100k_base", "o200k_base"])
def test_both_vocabularies_give_plausible_counts(encoding: str) -> None:
    """Each shipped vocabulary counts a tool definition near the estimate (JSON: 2-6 bytes per
    token) and a known sentence exactly; the counter says it is in use, not the estimate."""
    counter = Counter(encoding)  # type: ignore[arg-type]
    assert counter.count("hello world, this is a test of tokens") == 9
    tokens = counter.count(SAMPLE)
    assert len(SAMPLE) / 6 < tokens < len(SAMPLE) / 2
    assert tokens != estimate(SAMPLE)
    assert counter.name == encoding and counter.fallback is None


def test_a_vocabulary_that_cannot_load_falls_back_to_the_estimate() -> None:
    """A loader that fails (the package missing) means the estimate, said by `name` and `fallback`."""
    def missing(encoding: str) -> Callable[[str], int]:
        raise ModuleNotFoundError("No module named 'bpe_openai'")

    counter = Counter("o200k_base", missing)
    assert counter.name == "o200k_base" and not counter.loaded  # nothing loaded before a count
    assert counter.count("abcdefgh") == 2
    assert counter.name == "estimate"
    assert counter.fallback is not None and "bpe_openai" in counter.fallback


@pytest.mark.parametrize(("value", "expected"), [("o200k_base", "o200k_base"), ("cl100k_base", "cl100k_base"),
                                                  ("estimate", "estimate")])
def test_the_tokens_setting_takes_each_counter(tmp_path: Path, value: str, expected: str) -> None:
    """toolfunnel.json `tokens` picks the counter."""
    (tmp_path / "toolfunnel.json").write_text(json.dumps({"tokens": value}))
    assert load_settings(tmp_path).tokens == expected


def test_an_unknown_tokens_setting_is_refused_naming_file_field_and_choices(tmp_path: Path) -> None:
    """Any other value refuses the file, naming it, the field and the allowed values."""
    (tmp_path / "toolfunnel.json").write_text(json.dumps({"tokens": "gpt2"}))
    with pytest.raises(ConfigError) as raised:
        load_settings(tmp_path)
    message = str(raised.value)
    assert "toolfunnel.json" in message and "tokens" in message
    assert "o200k_base, cl100k_base, estimate" in message and "gpt2" in message


async def test_nothing_is_recorded_while_no_worker_counts() -> None:
    """Before the worker runs (a stdio gateway never starts it) texts are not kept at all: not
    queued, not dropped, never counted."""
    telemetry = Telemetry(Counter("estimate"), queue_size=3)
    _texts(telemetry, 5)
    assert telemetry.dropped == 0
    async with trio.open_nursery() as nursery:
        await nursery.start(telemetry.run)
        await telemetry.counted()
        nursery.cancel_scope.cancel()
    assert telemetry.statistics().profiles == {}


def _texts(telemetry: Telemetry, n: int) -> None:
    for _ in range(n):
        telemetry.record_text("default", "s", "meta_results", lambda: "abcd")


async def test_a_full_queue_drops_texts_and_counts_them_never_blocking() -> None:
    """Past the queue's size, recording drops (counted) instead of waiting; the worker counts the
    rest."""
    telemetry = Telemetry(Counter("estimate"), queue_size=3)
    async with trio.open_nursery() as nursery:
        await nursery.start(telemetry.run)
        # No checkpoint meanwhile: the waiting worker is handed the first, the queue holds three.
        _texts(telemetry, 6)
        assert telemetry.dropped == 2
        await telemetry.counted()
        nursery.cancel_scope.cancel()
    stats = telemetry.statistics()
    assert stats.dropped == 2
    assert stats.profiles["default"].given["meta_results"] == 4


def _catalog(upstreams: int = 2, tools: int = 3) -> Catalog:
    register = Register(tools=(ToolEntry("echo", "Echo", summary="Echo the arguments"),))
    upstream = [UpstreamTool(f"u{u}_t{t}", f"u{u}", f"t{t}", {
        "name": f"t{t}", "description": f"tool {t} of upstream {u}",
        "inputSchema": {"type": "object", "properties": {"path": {"type": "string"}}}})
        for u in range(upstreams) for t in range(tools)]
    return Catalog(register, ToolState({"u0_t1": Visibility(enabled=False)}), upstream)


def test_the_full_surface_is_every_enabled_tool_without_meta_tools() -> None:
    """`full_top_level`: the register tool and every enabled upstream tool (u0_t1 is disabled),
    with schemas; the lean list is the meta-tools alone."""
    catalog = _catalog()
    full = full_top_level(catalog, meta.DEFINITIONS)
    assert [t["name"] for t in full] == ["echo", "u0_t0", "u0_t2", "u1_t0", "u1_t1", "u1_t2"]
    assert all("inputSchema" in t for t in full)
    assert [t["name"] for t in catalog.top_level(meta.DEFINITIONS)] == list(meta.DEFINITIONS)


async def test_lists_are_counted_once_per_catalog_and_profile() -> None:
    """Every tools/list adds its tokens; the texts are built and counted only when the catalog
    (or the profile) is new."""
    built: list[str] = []

    def text(label: str, size: int) -> Callable[[], str]:
        def build() -> str:
            built.append(label)
            return "x" * size
        return build

    telemetry = Telemetry(Counter("estimate"))
    first, second = object(), object()
    async with trio.open_nursery() as nursery:
        await nursery.start(telemetry.run)
        for session, catalog, profile in (("a", first, "default"), ("b", first, "default"),
                                          ("c", first, "ops"), ("a", second, "default")):
            telemetry.record_list(profile, session, catalog, text("lean", 40), text("full", 400))
            await telemetry.counted()
        nursery.cancel_scope.cancel()
    assert built == ["lean", "full"] * 3
    stats = telemetry.statistics()
    default = stats.profiles["default"]
    assert (default.given["tools_list"], default.full, default.lists) == (30, 300, 3)
    assert stats.surfaces == {"default": (10, 100), "ops": (10, 100)}
    session_a = telemetry.session("default", "a")
    assert session_a is not None and (session_a.given["tools_list"], session_a.lists) == (20, 2)


# Each row: the steps of one session, and (found, direct, searches, searches without a call).
# ("search", names): a toolfunnel_list_tools listing `names`; ("call", name); ("end",).
Step = tuple[Any, ...]
DISCOVERY: list[tuple[str, list[Step], tuple[int, int, int, int]]] = [
    ("a call with no search first is direct", [("call", "x")], (0, 1, 0, 0)),
    ("a call of a listed tool is found", [("search", ["x", "y"]), ("call", "x")], (1, 0, 1, 0)),
    ("a call of a tool the search did not list is direct, and the search led to no call",
     [("search", ["x"]), ("call", "z"), ("end",)], (0, 1, 1, 1)),
    ("a search followed by another search without a call", [("search", ["x"]), ("search", ["y"]),
                                                             ("call", "y")], (1, 0, 2, 1)),
    ("a search still open is not counted until the session ends", [("search", ["x"])], (0, 0, 1, 0)),
    ("a search that listed nothing led to no call", [("search", []), ("end",)], (0, 0, 1, 1)),
    ("a tool listed by an earlier search stays found", [("search", ["x"]), ("call", "x"),
                                                        ("search", ["y"]), ("call", "x"), ("end",)],
     (2, 0, 2, 1)),
]


@pytest.mark.parametrize(("steps", "expected"), [(steps, expected) for _, steps, expected in DISCOVERY],
                         ids=[name for name, _, _ in DISCOVERY])
def test_found_direct_and_searches_without_a_call(steps: list[Step], expected: tuple[int, int, int, int]
                                                  ) -> None:
    """The rule of observe/telemetry.py, step by step, for the session and its profile."""
    telemetry = Telemetry(Counter("estimate"))
    telemetry.called("default", "other", "x")  # another session's call changes nothing here
    for step in steps:
        if step[0] == "search":
            telemetry.searched("p", "s", step[1])
        elif step[0] == "call":
            telemetry.called("p", "s", step[1])
        else:
            telemetry.ended("s")
    figures = telemetry.statistics().profiles["p"]
    assert (figures.found, figures.direct, figures.searches, figures.searches_without_call) == expected


def test_sessions_are_bounded_and_an_evicted_one_settles_its_search() -> None:
    """Past `max_sessions` the oldest session goes; its open search counts as without a call; the
    profile's totals keep everything."""
    telemetry = Telemetry(Counter("estimate"), max_sessions=2)
    telemetry.searched("p", "s1", ["x"])
    telemetry.called("p", "s2", "x")
    telemetry.called("p", "s3", "x")
    assert telemetry.session("p", "s1") is None
    assert telemetry.statistics().sessions == 2
    figures = telemetry.statistics().profiles["p"]
    assert (figures.direct, figures.searches, figures.searches_without_call) == (2, 1, 1)


@pytest.mark.timeout(60)
def test_tools_tokens_counts_the_home_offline_with_upstream_tools_as_approved(home: Path) -> None:
    """`tfunnel tools --tokens`: each definition's tokens (an approved upstream tool included,
    under its surfaced name, off the lean list), and tools/list lean below full."""
    settings = json.loads((home / "toolfunnel.json").read_text())
    (home / "toolfunnel.json").write_text(json.dumps({**settings, "tokens": "estimate"}))
    definition = {"name": "echo", "description": "Echo a message back",
                  "inputSchema": {"type": "object", "properties": {"message": {"type": "string"}}}}
    write(home, Book({"demo": Record(approved={"tool:echo": Pin("sha256:" + "0" * 64, definition)})}))
    rows, lean, full = token_rows(offline_catalog(home), Counter("estimate"))
    by_name = {name: (listed, tokens) for name, listed, tokens in rows}
    assert by_name["demo_echo"] == (False, estimate(dumps({**definition, "name": "demo_echo"})))
    assert by_name["toolfunnel_list_tools"][0] is True
    assert 0 < lean < full
    done = run(home, "tools", "--tokens")
    assert done.returncode == 0, done.stderr
    printed = done.stdout
    assert f"tools/list: lean {lean} tokens, full {full} tokens" in printed
    assert "counter estimate" in printed


@pytest.mark.timeout(60)
def test_settings_set_tokens_writes_the_counter_and_refuses_others(home: Path) -> None:
    """`tfunnel settings set tokens=...` (tf_settings) writes a counter's name and refuses any
    other value, naming the allowed ones."""
    done = run(home, "settings", "set", "tokens=o200k_base")
    assert done.returncode == 0, done.stderr
    assert load_settings(home).tokens == "o200k_base"
    refused = run(home, "settings", "set", "tokens=gpt2")
    assert refused.returncode != 0
    assert "'o200k_base', 'cl100k_base', 'estimate'" in refused.stderr
    assert load_settings(home).tokens == "o200k_base"


@pytest.mark.parametrize(("meta_tool", "kept"), [
    ("toolfunnel_list_tools", True), ("toolfunnel_tool_instructions", True), ("toolfunnel_howto", True),
    ("toolfunnel_run_tool", False),
])
def test_a_run_tool_result_is_the_tools_own_and_never_held_for_counting(meta_tool: str, kept: bool) -> None:
    """The meta-tools' own results are the lean surface's cost; `toolfunnel_run_tool` hands over
    the tool's result, which may be megabytes and is the same however the tool is called: it is
    neither counted nor held in the counting queue."""
    from tfunnel.protocol.results import ToolResult
    from tfunnel.surface.context import CallContext
    from tfunnel.surface.service import _given

    recorded: list[str] = []

    class Spy(Telemetry):
        def record_text(self, profile: str, session: str, part: Any, text: Any) -> None:
            recorded.append(part)

    _given(Spy(Counter("estimate")), CallContext(), meta_tool, ToolResult.text("x" * 1_000_000))
    assert recorded == (["meta_results"] if kept else [])
