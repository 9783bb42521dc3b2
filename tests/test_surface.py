"""Table-driven tests for the client-facing surface: catalog, search, argument validation, meta-tools."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jsonschema
import pytest

from tfunnel.config.home import seed_dir
from tfunnel.config.load import load_register
from tfunnel.config.model import META_TOOL_NAMES, Invoke, Register, ToolEntry, ToolState, Visibility
from tfunnel.errors import ToolFailure
from tfunnel.surface import meta, search
from tfunnel.surface.catalog import Catalog, Kind, Resolved, resolve_visibility
from tfunnel.surface.validation import validate_args

META = list(META_TOOL_NAMES)
SHELL = Invoke("shell", "true")
HASH_SCHEMA: Mapping[str, Any] = {
    "type": "object",
    "properties": {"text": {"type": "string"}, "algorithm": {"enum": ["sha256", "sha1", "md5"]}},
    "required": ["text"],
    "additionalProperties": False,
}
REGISTER = Register(tools=(
    ToolEntry("echo", "Echo", "Returns the arguments it was given.", "demo", invoke=SHELL),
    ToolEntry("hash", "Hash", "Computes the sha256, sha1 or md5 hex digest of a text.", "crypto",
              input_schema=HASH_SCHEMA, invoke=SHELL),
    ToolEntry("base64", "Base64 Encode/Decode", "Encodes text as base64 or decodes it.", "encoding",
              invoke=SHELL),
    ToolEntry("text-stats", "Text Stats", "Counts the characters, words and lines of a TEXT.", "text",
              invoke=SHELL),
    ToolEntry("notes", "Notes", "How to write release notes.", "docs", mode="reference",
              instructions="Write them by hand."),
))
ALL_IDS = [t.id for t in REGISTER.tools]


def catalog(**entries: Visibility) -> Catalog:
    return Catalog(REGISTER, ToolState(entries=entries))


# --------------------------------------------------------------------------- visibility


@pytest.mark.parametrize(
    ("kind", "vis", "expected"),
    [
        pytest.param("meta", None, Resolved(True, True, False), id="meta-default"),
        pytest.param("local", None, Resolved(True, False, False), id="local-default"),
        pytest.param("meta", Visibility(), Resolved(True, True, False), id="meta-empty-entry"),
        pytest.param("local", Visibility(), Resolved(True, False, False), id="local-empty-entry"),
        pytest.param("meta", Visibility(hot=False), Resolved(True, False, False), id="meta-unhot"),
        pytest.param("local", Visibility(hot=True), Resolved(True, True, False), id="local-hot"),
        pytest.param("meta", Visibility(enabled=False), Resolved(False, True, False), id="meta-disabled"),
        pytest.param("local", Visibility(enabled=False, hot=True), Resolved(False, True, False),
                     id="local-disabled-hot"),
        pytest.param("local", Visibility(enabled=True), Resolved(True, False, False), id="local-enabled"),
        pytest.param("local", Visibility(hidden=True), Resolved(True, False, True), id="local-hidden"),
        pytest.param("meta", Visibility(hidden=True), Resolved(True, True, True), id="meta-hidden"),
        pytest.param("local", Visibility(hidden=False), Resolved(True, False, False), id="local-unhidden"),
    ],
)
def test_resolve_visibility(kind: Kind, vis: Visibility | None, expected: Resolved) -> None:
    """Defaults: enabled; hot only for meta-tools; never hidden; an explicit value wins."""
    assert resolve_visibility(kind, vis) == expected


# --------------------------------------------------------------------------- top level


def test_top_level_empty_state_is_four_meta_tools() -> None:
    """With an empty state the top level is exactly the four meta-tool definitions, in order."""
    tools = Catalog(REGISTER, ToolState()).top_level(meta.DEFINITIONS)
    assert [t["name"] for t in tools] == [
        "toolfunnel_list_tools", "toolfunnel_tool_instructions", "toolfunnel_run_tool", "toolfunnel_howto"]
    assert tools == [dict(meta.DEFINITIONS[name]) for name in META]


@pytest.mark.parametrize(
    ("entries", "names"),
    [
        pytest.param({"hash": Visibility(hot=True)}, [*META, "hash"], id="hot-local-after-meta"),
        pytest.param({"text-stats": Visibility(hot=True), "echo": Visibility(hot=True)},
                     [*META, "echo", "text-stats"], id="register-order"),
        pytest.param({"hash": Visibility(hot=True, enabled=False)}, META, id="disabled-hot-absent"),
        pytest.param({"hash": Visibility(enabled=True)}, META, id="enabled-not-hot-absent"),
        pytest.param({"toolfunnel_howto": Visibility(hot=False)}, META[:3], id="meta-unhot-absent"),
        pytest.param({"toolfunnel_list_tools": Visibility(enabled=False)}, META[1:],
                     id="meta-disabled-absent"),
        pytest.param({"toolfunnel_run_tool": Visibility(hidden=True), "hash": Visibility(hidden=True)}, META,
                     id="hidden-changes-nothing"),
        pytest.param({"hash": Visibility(hot=True, hidden=True)}, [*META, "hash"],
                     id="hidden-hot-still-listed"),
        pytest.param({"Hash": Visibility(hot=True)}, META, id="state-keyed-by-id-not-display"),
        pytest.param({"ghost": Visibility(hot=True)}, META, id="unknown-name-ignored"),
    ],
)
def test_top_level_names(entries: dict[str, Visibility], names: list[str]) -> None:
    """Top level: hot enabled meta-tools, then hot enabled local tools; hidden never matters."""
    assert [t["name"] for t in catalog(**entries).top_level(meta.DEFINITIONS)] == names


def test_top_level_local_definition() -> None:
    """A hot local tool is listed with its id, display title, summary and inputSchema."""
    tools = catalog(hash=Visibility(hot=True), echo=Visibility(hot=True)).top_level(meta.DEFINITIONS)
    by_name = {t["name"]: t for t in tools}
    assert by_name["hash"] == {"name": "hash", "title": "Hash",
                               "description": "Computes the sha256, sha1 or md5 hex digest of a text.",
                               "inputSchema": dict(HASH_SCHEMA)}
    assert by_name["echo"]["inputSchema"]["type"] == "object"


# --------------------------------------------------------------------------- briefs


@pytest.mark.parametrize(
    ("entries", "kwargs", "ids"),
    [
        pytest.param({}, {}, ALL_IDS, id="all-in-register-order"),
        pytest.param({"hash": Visibility(enabled=False)}, {}, ["echo", "base64", "text-stats", "notes"],
                     id="disabled-excluded"),
        pytest.param({"hash": Visibility(hidden=True)}, {}, ALL_IDS, id="hidden-still-listed"),
        pytest.param({}, {"filter": "TEXT"}, ["hash", "base64", "text-stats"], id="filter-case-insensitive"),
        pytest.param({}, {"filter": "encode/"}, ["base64"], id="filter-display-name"),
        pytest.param({}, {"filter": "tats"}, ["text-stats"], id="filter-id"),
        pytest.param({}, {"filter": "crypto"}, [], id="filter-not-category"),
        pytest.param({}, {"category": "crypto"}, ["hash"], id="category-exact"),
        pytest.param({}, {"category": "Crypto"}, [], id="category-case-sensitive"),
        pytest.param({}, {"category": "cryp"}, [], id="category-not-substring"),
        pytest.param({}, {"limit": 2}, ["echo", "hash"], id="limit"),
        pytest.param({}, {"query": "sha256 digest"}, ["hash"], id="query"),
        pytest.param({}, {"query": "text", "limit": 1}, ["text-stats"], id="query-limit"),
        pytest.param({}, {"query": "zebra"}, [], id="query-no-match"),
        pytest.param({"hash": Visibility(enabled=False)}, {"query": "sha256"}, [], id="query-skips-disabled"),
        pytest.param({}, {"query": "release", "category": "docs"}, ["notes"], id="query-and-category"),
    ],
)
def test_briefs(entries: dict[str, Visibility], kwargs: dict[str, Any], ids: list[str]) -> None:
    """briefs: enabled tools only; filter over id/name/summary; category exact; query ranked; limit."""
    assert [b["id"] for b in catalog(**entries).briefs(**kwargs)] == ids


def test_briefs_shape() -> None:
    """A brief is exactly {id, name, summary, category}."""
    assert catalog().briefs(category="crypto") == [
        {"id": "hash", "name": "Hash", "summary": "Computes the sha256, sha1 or md5 hex digest of a text.",
         "category": "crypto"}]


def test_briefs_query_ranks_seed_register() -> None:
    """Over the shipped demo register, "sha256 digest" ranks hash first."""
    cat = Catalog(load_register(seed_dir()), ToolState())
    assert cat.briefs(query="sha256 digest")[0]["id"] == "hash"
    assert cat.briefs(query="stats")[0]["id"] == "text-stats"


@pytest.mark.parametrize(
    ("name", "enabled_local", "hot_local"),
    [
        pytest.param("hash", "hash", None, id="by-id"),
        pytest.param("Hash", "hash", None, id="by-display-name"),
        pytest.param("nope", None, None, id="unknown"),
    ],
)
def test_lookup(name: str, enabled_local: str | None, hot_local: str | None) -> None:
    """Local tools are found by id or display name; hot_local needs hot."""
    cat = catalog()
    found = cat.enabled_local(name)
    assert (found.id if found else None) == enabled_local
    hot = cat.hot_local(name)
    assert (hot.id if hot else None) == hot_local
    assert catalog(hash=Visibility(enabled=False)).enabled_local("hash") is None


# --------------------------------------------------------------------------- search

DOCS = [
    search.Document("hash", "hash Hash computes the sha256 sha1 md5 hex digest of a text"),
    search.Document("base64", "base64 Base64 encode decode text"),
    search.Document("text-stats", "text_stats Text Stats counts characters words lines of a text"),
    search.Document("uuid", "uuid UUID generator random identifiers count"),
]


def test_a_search_cannot_probe_reference_instructions() -> None:
    """A reference tool's instructions (its action, handed over only through the gate) are not
    searched; a gateway tool's instructions are."""
    register = Register(tools=(
        ToolEntry(id="deploy-notes", name="Deploy notes", mode="reference", instructions="token hunter2"),
        ToolEntry(id="runner", name="Runner", invoke=Invoke("shell", "true"), instructions="uses hunter3"),
    ))
    cat = Catalog(register, ToolState())
    assert cat.briefs(query="hunter2") == []
    assert [b["id"] for b in cat.briefs(query="hunter3")] == ["runner"]
    assert [b["id"] for b in cat.briefs(query="deploy")] == ["deploy-notes"]


@pytest.mark.parametrize(
    ("query", "limit", "expected"),
    [
        pytest.param("sha256", 10, ["hash"], id="single-term"),
        pytest.param("SHA256 Digest", 10, ["hash"], id="case-insensitive"),
        pytest.param("text", 10, ["text-stats", "base64", "hash"], id="ranked-by-frequency-and-length"),
        pytest.param("text", 2, ["text-stats", "base64"], id="limit"),
        pytest.param("stats", 10, ["text-stats"], id="underscore-split-in-doc"),
        pytest.param("text-stats", 10, ["text-stats", "base64", "hash"], id="hyphen-split-in-query"),
        pytest.param("random uuid", 10, ["uuid"], id="two-terms"),
        pytest.param("decode digest", 10, ["base64", "hash"], id="either-term"),
        pytest.param("zebra", 10, [], id="no-match"),
        pytest.param("", 10, [], id="empty-query"),
        pytest.param("--- ___", 10, [], id="punctuation-only"),
    ],
)
def test_rank(query: str, limit: int, expected: list[str]) -> None:
    """rank returns matching keys best first, honours the limit and [] when nothing matches."""
    assert search.rank(query, DOCS, limit) == expected


def test_rank_no_documents_and_ties() -> None:
    """No documents → []; equal scores keep input order."""
    assert search.rank("x", [], 5) == []
    twins = [search.Document("b", "same words"), search.Document("a", "same words")]
    assert search.rank("same", twins, 5) == ["b", "a"]


@pytest.mark.parametrize(
    ("text", "tokens"),
    [
        pytest.param("text-stats", ["text", "stats"], id="hyphen"),
        pytest.param("text_stats", ["text", "stats"], id="underscore"),
        pytest.param("Hello, World!", ["hello", "world"], id="punctuation-case"),
        pytest.param("sha256 a1-b2", ["sha256", "a1", "b2"], id="digits"),
        pytest.param("", [], id="empty"),
    ],
)
def test_tokenize(text: str, tokens: list[str]) -> None:
    """Tokens are lower-case alphanumeric runs; - and _ separate them."""
    assert search.tokenize(text) == tokens


# --------------------------------------------------------------------------- validation

ARGS_SCHEMA: Mapping[str, Any] = {
    "type": "object",
    "properties": {
        "text": {"type": "string"},
        "algorithm": {"enum": ["sha256", "sha1", "md5"]},
        "count": {"type": "integer"},
        "opts": {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["mode"]},
    },
    "required": ["text"],
    "additionalProperties": False,
}


@pytest.mark.parametrize(
    ("schema", "args", "fragments"),
    [
        pytest.param(ARGS_SCHEMA, {}, ["missing required argument 'text'"], id="missing-required"),
        pytest.param(ARGS_SCHEMA, {"text": "a", "extra": 1},
                     ["unexpected argument 'extra'", "allowed: algorithm, count, opts, text"],
                     id="additional-property"),
        pytest.param(ARGS_SCHEMA, {"text": "a", "algorithm": "md4"},
                     ["argument 'algorithm'", "'sha256', 'sha1', 'md5'", "'md4'"], id="enum"),
        pytest.param(ARGS_SCHEMA, {"text": 5}, ["argument 'text'", "string"], id="wrong-type"),
        pytest.param(ARGS_SCHEMA, {"text": "a", "count": "3"}, ["argument 'count'", "integer"],
                     id="wrong-type-integer"),
        pytest.param(ARGS_SCHEMA, {"text": "a", "opts": {"mode": 1, "n": "x"}},
                     ["argument 'opts.n'", "integer"], id="nested-wrong-type"),
        pytest.param(ARGS_SCHEMA, {"text": "a", "opts": {}}, ["missing required argument 'opts.mode'"],
                     id="nested-missing-required"),
        pytest.param({"type": "object", "required": ["it's"]}, {}, ["missing required argument \"it's\""],
                     id="required-name-with-quote"),
    ],
)
def test_validate_args_names_the_field(schema: Mapping[str, Any], args: dict[str, Any],
                                       fragments: list[str]) -> None:
    """Invalid arguments raise ToolFailure naming the tool, the argument and what is allowed."""
    with pytest.raises(ToolFailure) as info:
        validate_args("hash", schema, args)
    message = str(info.value)
    assert message.startswith("invalid arguments for 'hash': ")
    for fragment in fragments:
        assert fragment in message


@pytest.mark.parametrize(
    ("schema", "args"),
    [
        pytest.param(None, {"anything": [1, 2]}, id="no-schema"),
        pytest.param({}, {"x": 1}, id="empty-schema"),
        pytest.param(ARGS_SCHEMA, {"text": "a", "algorithm": "md5", "count": 2, "opts": {"mode": 0}},
                     id="valid"),
        pytest.param({"type": "object"}, {"k": None}, id="open-object"),
    ],
)
def test_validate_args_accepts(schema: Mapping[str, Any] | None, args: dict[str, Any]) -> None:
    """Valid arguments, and any arguments under a missing schema, pass."""
    validate_args("t", schema, args)


# --------------------------------------------------------------------------- meta


@pytest.mark.parametrize("topic", meta.HOWTO_TOPICS)
def test_howto_topic_readable(topic: str) -> None:
    """Every howto topic has a non-empty markdown guide."""
    assert meta.howto_text(topic).strip()


def test_definitions_exact_names() -> None:
    """DEFINITIONS holds exactly the four meta-tools, each named by its key."""
    assert list(meta.DEFINITIONS) == META
    assert all(definition["name"] == name for name, definition in meta.DEFINITIONS.items())
    topic = meta.DEFINITIONS[meta.HOWTO]["inputSchema"]["properties"]["topic"]
    assert topic["enum"] == list(meta.HOWTO_TOPICS)


@pytest.mark.parametrize("name", META)
def test_definition_schema(name: str) -> None:
    """Each meta-tool inputSchema is a closed object schema that passes check_schema."""
    schema = meta.DEFINITIONS[name]["inputSchema"]
    assert schema["type"] == "object"
    assert schema["additionalProperties"] is False
    jsonschema.validators.validator_for(schema).check_schema(schema)


def test_synthesized_instructions() -> None:
    """Synthesized instructions show the summary, the required fields and the exact run call."""
    text = meta.synthesized_instructions("hash", "Hash", "Digests.", HASH_SCHEMA)
    assert "# Hash (`hash`)" in text and "Digests." in text
    assert '{"name": "hash", "args": {"text": "<text>"}}' in text
    assert "Required: text" in text
