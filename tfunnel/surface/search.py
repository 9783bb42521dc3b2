"""BM25 relevance over tool documents (pure)."""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

# Standard Okapi BM25 constants: term-frequency saturation and length normalisation.
K1 = 1.2
B = 0.75
_TOKEN = re.compile(r"[a-z0-9]+")


def tokenize(text: str) -> list[str]:
    """Lower-case alphanumeric runs; `text-stats` and `text_stats` both give `text`, `stats`."""
    return _TOKEN.findall(text.lower())


@dataclass(frozen=True)
class Document:
    key: str
    text: str


def rank(query: str, documents: Sequence[Document], limit: int) -> list[str]:
    """Keys of the documents matching `query`, best first (ties keep input order)."""
    terms = set(tokenize(query))
    if not terms or not documents:
        return []
    bags = [Counter(tokenize(doc.text)) for doc in documents]
    lengths = [sum(bag.values()) for bag in bags]
    average = sum(lengths) / len(lengths) or 1.0
    n = len(documents)
    scored: list[tuple[float, int]] = []
    for index, bag in enumerate(bags):
        score = 0.0
        for term in terms:
            tf = bag.get(term, 0)
            if not tf:
                continue
            df = sum(1 for other in bags if term in other)
            idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
            score += idf * tf * (K1 + 1) / (tf + K1 * (1 - B + B * lengths[index] / average))
        if score > 0:
            scored.append((score, index))
    scored.sort(key=lambda item: (-item[0], item[1]))
    return [documents[index].key for _, index in scored[:limit]]
