"""Relevance over tool documents (pure): fielded BM25 with name splitting, stemming, stop words
and a small table of synonyms.

A document is a `Fields`: its names (id, name, title) count most, then its prose (description,
summary, instructions), its parameters (names and descriptions) and its upstream and category.
Words are split at case changes and at `_ - . /` (`getFileInfo`, `get_file_info`, `get.file-info`
all give `get file info`), lower-cased, stop words dropped and Porter-stemmed. A query's words
also look for their synonyms (`remove` finds `delete`), at a lower weight. An `Index` is built once
over a fixed list of documents; ranking is deterministic, ties keep input order.
"""

from __future__ import annotations

import heapq
import itertools
import math
import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields
from functools import lru_cache

from tfunnel.surface.stem import stem

# BM25 term-frequency saturation; each field has its own length normalisation below.
K1 = 1.2
# How much a hit in each field counts, and how much that field's length dampens it (BM25F).
FIELD_WEIGHTS = {"name": 3.0, "text": 1.0, "params": 0.5, "upstream": 1.0}
FIELD_B = {"name": 0.3, "text": 0.75, "params": 0.75, "upstream": 0.0}
SYNONYM_WEIGHT = 0.7  # a synonym's hit counts this much of the word the query used
JOINED_WEIGHT = 0.8  # two adjacent query words written as one (`file system` -> `filesystem`)
INDEX_CACHE = 16  # indexes kept (one per distinct list of documents a catalog searched)

_RUN = re.compile(r"[A-Za-z0-9]+")
_CASE = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")

_STOP_TEXT = """
a about above after again all also am an and any are as at be been before being below
both but by can could did do does doing done during each else for from further had has have
having he her here hers him his how i if in into is it its itself just let lets me might mine
more most much must my myself no nor not of off on once only or other our ours out over own
please she should so some such than that the their theirs them then there these they this
those through to too under until up upon us very via want was we were what whatever when where
whether which while who whom whose why will with within without would yet you your yours
"""
STOP_WORDS = frozenset(_STOP_TEXT.split())

# Groups of words that name the same thing in software requests. Generic on purpose: verbs and
# nouns any tool list uses, not the answers to one benchmark.
SYNONYMS: tuple[tuple[str, ...], ...] = (
    ("get", "fetch", "retrieve", "read", "obtain", "show", "view", "display", "return", "load"),
    ("list", "enumerate", "ls", "show", "all"),
    ("find", "search", "lookup", "locate", "query", "seek", "grep", "look"),
    ("remove", "delete", "erase", "drop", "forget", "purge", "rm", "destroy", "discard", "clear"),
    ("create", "make", "new", "add", "generate", "build", "start", "open", "init"),
    ("write", "save", "store", "persist", "put", "overwrite"),
    ("remember", "memorize", "memory", "store", "save", "note", "record", "knowledge"),
    ("update", "modify", "change", "edit", "alter", "patch", "set", "replace"),
    ("move", "rename", "mv", "relocate"),
    ("copy", "duplicate", "clone", "fork"),
    ("directory", "folder", "dir"),
    ("file", "document"),
    ("time", "clock", "date", "hour", "now", "current", "today", "timezone", "zone"),
    ("convert", "translate", "transform"),
    ("download", "fetch", "grab", "pull"),
    ("url", "link", "web", "webpage", "page", "website", "site", "internet", "http", "online"),
    ("compare", "diff", "difference"),
    ("history", "log", "logs", "past"),
    ("repository", "repo"),
    ("issue", "bug", "ticket", "problem"),
    ("comment", "reply", "respond"),
    ("review", "approve", "feedback"),
    ("relation", "relationship", "link", "connect", "associate"),
    ("entity", "node", "object", "item", "thing"),
    ("observation", "fact", "note", "detail"),
    ("user", "account", "profile", "person", "people", "developer"),
    ("metadata", "info", "information", "details", "stat", "stats", "attributes", "properties"),
    ("size", "sizes", "large", "big", "bytes", "biggest", "largest"),
    ("multiple", "several", "many", "batch", "bulk"),
    ("tree", "hierarchy", "recursive", "nested"),
    ("status", "state", "check", "checks"),
    ("compress", "zip", "gzip", "archive"),
    ("image", "picture", "photo", "png", "jpeg", "jpg", "logo", "icon"),
    ("audio", "sound", "mp3"),
    ("environment", "env", "variables"),
    ("configuration", "config", "settings"),
    ("sum", "add", "plus", "total", "calculate", "arithmetic"),
    ("echo", "repeat", "back"),
    ("think", "thought", "reason", "reasoning", "plan", "reflect", "brainstorm", "analyze"),
    ("research", "investigate", "study"),
    ("switch", "checkout"),
    ("code", "source", "function"),
    ("contents", "content", "text", "body"),
    ("toggle", "enable", "disable", "turn"),
)
# Shorthand a request may use for words the documents spell out.
ABBREVIATIONS = {
    "mkdir": ("make", "directory"), "ls": ("list",), "mv": ("move",), "rm": ("remove",),
    "cat": ("read", "file"), "pr": ("pull", "request"), "prs": ("pull", "request"),
    "cwd": ("current", "directory"), "env": ("environment",), "tz": ("timezone",),
    "ci": ("status", "checks"), "stat": ("metadata",),
}


@dataclass(frozen=True)
class Fields:
    """One document: `name` (id, name, title), `text` (description, summary, instructions),
    `params` (parameter names and descriptions), `upstream` (upstream id, category)."""

    name: str = ""
    text: str = ""
    params: str = ""
    upstream: str = ""


_FIELDS = tuple(f.name for f in fields(Fields))


def split(text: str) -> list[str]:
    """Lower-case words: runs of letters and digits, also split at case changes
    (`getFileInfo` -> `get file info`, `HTTPServer` -> `http server`)."""
    return [part.lower() for run in _RUN.findall(text) for part in _CASE.sub(" ", run).split()]


def tokenize(text: str) -> list[str]:
    """The words of `text` (`split`); `text-stats` and `text_stats` both give `text`, `stats`."""
    return split(text)


def terms(text: str) -> list[str]:
    """What is indexed for `text`: its words without stop words, stemmed."""
    return [stem(word) for word in split(text) if word not in STOP_WORDS]


def _build_synonyms() -> dict[str, tuple[str, ...]]:
    found: dict[str, dict[str, None]] = defaultdict(dict)
    for group in SYNONYMS:
        stems = [stem(word) for word in group]
        for one in stems:
            for other in stems:
                if other != one:
                    found[one][other] = None
    return {word: tuple(others) for word, others in found.items()}


_SYNONYMS = _build_synonyms()


def query_concepts(query: str) -> list[dict[str, float]]:
    """What a query looks for: one concept per word (stop words dropped), each the stemmed word
    at weight 1 and its synonyms at `SYNONYM_WEIGHT`; shorthand (`mkdir`) adds the words it
    stands for, two adjacent words joined (`file system` -> `filesystem`) one at `JOINED_WEIGHT`.
    A document scores a concept by its best term, so a synonym adds nothing to a word it matched."""
    words = [word for word in split(query) if word not in STOP_WORDS]
    concepts: list[dict[str, float]] = []
    seen: set[str] = set()
    spelled = [more for word in words for more in ABBREVIATIONS.get(word, ())]
    for word in [*words, *spelled]:
        term = stem(word)
        if term in seen:
            continue
        seen.add(term)
        concept = dict.fromkeys(_SYNONYMS.get(term, ()), SYNONYM_WEIGHT)
        concept[term] = 1.0
        concepts.append(concept)
    for left, right in itertools.pairwise(words):
        joined = stem(left + right)
        if joined not in seen:
            seen.add(joined)
            concepts.append({joined: JOINED_WEIGHT})
    return concepts


class Index:
    """BM25F over a fixed list of documents, built once; `rank` gives positions in that list."""

    def __init__(self, documents: Sequence[Fields]) -> None:
        self.size = len(documents)
        bags = [{field: terms(getattr(doc, field)) for field in _FIELDS} for doc in documents]
        averages = {field: (sum(len(bag[field]) for bag in bags) / (self.size or 1)) or 1.0
                    for field in _FIELDS}
        weighted: dict[str, dict[int, float]] = defaultdict(dict)
        for position, bag in enumerate(bags):
            for field, words in bag.items():
                norm = 1 - FIELD_B[field] + FIELD_B[field] * len(words) / averages[field]
                share = FIELD_WEIGHTS[field] / norm
                for word in words:
                    row = weighted[word]
                    row[position] = row.get(position, 0.0) + share
        # Each posting holds idf * saturated weighted term frequency: a query only adds them up.
        self._postings: dict[str, tuple[tuple[int, float], ...]] = {}
        for word, row in weighted.items():
            idf = math.log(1 + (self.size - len(row) + 0.5) / (len(row) + 0.5))
            self._postings[word] = tuple((position, idf * tf / (K1 + tf))
                                         for position, tf in sorted(row.items()))

    def rank(self, query: str, limit: int) -> list[int]:
        """Positions of the documents matching `query`, best first (ties keep input order)."""
        scores: dict[int, float] = defaultdict(float)
        for concept in query_concepts(query):
            if len(concept) == 1:  # one term (most concepts): its postings add up directly
                [(term, weight)] = concept.items()
                for position, value in self._postings.get(term, ()):
                    scores[position] += weight * value
                continue
            best: dict[int, float] = {}
            for term, weight in concept.items():
                for position, value in self._postings.get(term, ()):
                    if best.get(position, 0.0) < weight * value:
                        best[position] = weight * value
            for position, value in best.items():
                scores[position] += value
        # (-score, position) pairs compare in C: best first, ties in input order.
        ranked = heapq.nsmallest(limit, [(-score, position) for position, score in scores.items()])
        return [position for negated, position in ranked if negated < 0]


@lru_cache(maxsize=INDEX_CACHE)
def index(documents: tuple[Fields, ...]) -> Index:
    """The index of these documents, built on first use and kept (a catalog is immutable, so
    the same documents come back for every query it answers)."""
    return Index(documents)


@dataclass(frozen=True)
class Document:
    """A one-field document: `text` is searched as prose."""

    key: str
    text: str


def rank(query: str, documents: Iterable[Document], limit: int) -> list[str]:
    """Keys of the documents matching `query`, best first (ties keep input order)."""
    docs = list(documents)
    order = index(tuple(Fields(text=doc.text) for doc in docs)).rank(query, limit)
    return [docs[position].key for position in order]
