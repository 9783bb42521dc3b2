"""Tool search (surface/search.py, surface/stem.py): splitting, stemming, stop words, synonyms,
fielded ranking, determinism, and the index a catalog builds once."""

from __future__ import annotations

from typing import Any

import pytest

from tfunnel.config.model import Register, ToolState
from tfunnel.surface import search
from tfunnel.surface.catalog import Catalog
from tfunnel.surface.stem import stem
from tfunnel.surface.upstream_tools import assemble


@pytest.mark.parametrize(
    ("text", "words"),
    [
        pytest.param("get_file_info", ["get", "file", "info"], id="snake"),
        pytest.param("getFileInfo", ["get", "file", "info"], id="camel"),
        pytest.param("GetFileInfo", ["get", "file", "info"], id="pascal"),
        pytest.param("HTTPServer", ["http", "server"], id="acronym-then-word"),
        pytest.param("fs.read.file", ["fs", "read", "file"], id="dotted"),
        pytest.param("gzip-file-as-resource", ["gzip", "file", "as", "resource"], id="hyphen"),
        pytest.param("repo/path:x", ["repo", "path", "x"], id="slash-colon"),
        pytest.param("sha256 base64", ["sha256", "base64"], id="digits-stay"),
        pytest.param("includeImage2", ["include", "image2"], id="camel-digit"),
        pytest.param("MCP", ["mcp"], id="all-caps"),
        pytest.param("", [], id="empty"),
    ],
)
def test_split(text: str, words: list[str]) -> None:
    """Names split at `_ - . /` and at case changes, lower-cased; digits stay with their word."""
    assert search.split(text) == words


@pytest.mark.parametrize(
    ("word", "expected"),
    [
        ("files", "file"), ("directories", "directori"), ("directory", "directori"),
        ("connections", "connect"), ("connected", "connect"), ("connecting", "connect"),
        ("staged", "stage"), ("staging", "stage"), ("running", "run"), ("hopping", "hop"),
        ("relational", "relat"), ("caresses", "caress"), ("ponies", "poni"), ("agreed", "agre"),
        ("searches", "search"), ("compression", "compress"), ("generalization", "gener"),
        ("is", "is"), ("sha256", "sha256"),
    ],
)
def test_stem(word: str, expected: str) -> None:
    """The Porter stemmer gives a word's forms one stem; short words and words with digits stay."""
    assert stem(word) == expected


@pytest.mark.parametrize(
    ("text", "terms"),
    [
        pytest.param("Read the contents of a file", ["read", "content", "file"], id="stop-words"),
        pytest.param("listDirectories", ["list", "directori"], id="split-then-stem"),
        pytest.param("what is it", [], id="only-stop-words"),
    ],
)
def test_terms(text: str, terms: list[str]) -> None:
    """Indexed terms: split words, stop words dropped, stemmed."""
    assert search.terms(text) == terms


@pytest.mark.parametrize(
    ("query", "term", "weight"),
    [
        pytest.param("remove a file", "delet", search.SYNONYM_WEIGHT, id="remove-delete"),
        pytest.param("fetch the page", "get", search.SYNONYM_WEIGHT, id="fetch-get"),
        pytest.param("what is the clock", "time", search.SYNONYM_WEIGHT, id="clock-time"),
        pytest.param("remember this", "store", search.SYNONYM_WEIGHT, id="remember-store"),
        pytest.param("deleting files", "delet", 1.0, id="own-word-stemmed"),
        pytest.param("mkdir build", "directori", 1.0, id="shorthand-spelled-out"),
        pytest.param("file system", "filesystem", search.JOINED_WEIGHT, id="adjacent-words-joined"),
    ],
)
def test_query_concepts(query: str, term: str, weight: float) -> None:
    """A query looks for its words, their synonyms (lower), shorthand spelled out and two
    adjacent words joined."""
    found = {t: w for concept in search.query_concepts(query) for t, w in concept.items()}
    assert found.get(term) == weight


TOOLS: dict[str, list[dict[str, Any]]] = {
    "files": [
        {"name": "read_text", "description": "Return what a document holds.",
         "inputSchema": {"type": "object", "properties": {"path": {"type": "string"}}}},
        {"name": "writeNote", "description": "Put text somewhere.",
         "inputSchema": {"type": "object", "properties": {
             "target": {"type": "string", "description": "the destination folder"}}}},
        {"name": "purge", "description": "Get rid of a directory entry for good."},
    ],
    "clock": [
        {"name": "now", "description": "Say which hour it is."},
    ],
}


def catalog() -> Catalog:
    return Catalog(Register(), ToolState(), upstream=assemble(TOOLS, expose=(), taken=set()))


@pytest.mark.parametrize(
    ("query", "first"),
    [
        pytest.param("write note", "files_writeNote", id="camel-name"),
        pytest.param("read text", "files_read_text", id="snake-name"),
        pytest.param("destination", "files_writeNote", id="parameter-description"),
        pytest.param("target", "files_writeNote", id="parameter-name"),
        pytest.param("delete a folder", "files_purge", id="synonyms-only"),
        pytest.param("what time is it", "clock_now", id="synonym-time-hour"),
        pytest.param("clock", "clock_now", id="upstream-id"),
        pytest.param("reading texts", "files_read_text", id="stemmed"),
    ],
)
def test_catalog_query_finds(query: str, first: str) -> None:
    """`briefs(query=..)` ranks over names, prose, parameters and the upstream, split and stemmed."""
    assert catalog().briefs(query=query)[0]["id"] == first


def test_name_hit_outranks_prose_hit() -> None:
    """A word in a tool's name counts more than the same word in another's description."""
    docs = [search.Fields(name="alpha", text="mentions report once"),
            search.Fields(name="report", text="alpha words here")]
    assert search.Index(docs).rank("report", 5) == [1, 0]


def test_ranking_is_deterministic_and_ties_keep_input_order() -> None:
    """Equal documents keep input order; the same query twice gives the same answer."""
    docs = [search.Fields(name="same tool")] * 3 + [search.Fields(name="other")]
    index = search.Index(docs)
    assert index.rank("same tool", 10) == [0, 1, 2]
    cat = catalog()
    assert cat.briefs(query="delete a folder") == cat.briefs(query="delete a folder")


def test_a_catalog_builds_its_index_once() -> None:
    """Every query of one catalog is answered from the same index, built at its first query
    (a filtered query's index is kept by `search.index`, for the next query with that filter)."""
    search.index.cache_clear()
    built: list[int] = []
    real = search.Index.__init__

    def counting(self: search.Index, documents: Any) -> None:
        built.append(len(documents))
        real(self, documents)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(search.Index, "__init__", counting)
        cat = catalog()
        assert built == []
        first = cat.briefs(query="write note")
        assert cat.briefs(query="clock") and cat.briefs(query="write note") == first
        assert len(built) == 1
        cat.briefs(query="clock", filter="c")
        cat.briefs(query="time", filter="c")
        assert len(built) == 2
        catalog().briefs(query="clock")  # a new catalog (a surface change) builds its own
        assert len(built) == 3


def test_no_match_and_limit() -> None:
    """Nothing matching gives []; `limit` caps the hits."""
    cat = catalog()
    assert cat.briefs(query="zebra") == []
    assert cat.briefs(query="the a of") == []
    assert len(cat.briefs(query="file folder text document", limit=2)) == 2


def test_what_a_client_asks_for_never_grows_a_catalog() -> None:
    """Any number of distinct categories and filters, with or without a query: the catalog keeps
    one listing of its tools (a narrowed index lives in `search.index`'s bounded cache)."""
    cat = catalog()
    for index in range(200):
        cat.briefs(category=f"c{index}")
        cat.briefs(category=f"c{index}", query="clock")
        cat.briefs(filter=f"f{index}", query="clock")
    assert list(cat._listings) == ["tools"]
    assert search.index.cache_info().currsize <= search.INDEX_CACHE
