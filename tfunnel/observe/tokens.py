"""Counting tokens: what a text costs a model's context (no I/O, no trio).

`toolfunnel.json` `tokens` picks the counter: `o200k_base` or `cl100k_base` (the vocabularies
`bpe-openai` ships in its wheel: nothing is downloaded), or `estimate`, `ceil(UTF-8 bytes / 4)`,
the usual rule of thumb for English and JSON (about 4 bytes per token for both vocabularies). A
vocabulary that cannot be loaded (the package missing or broken) falls back to the estimate,
logged once; `Counter.name` then says `estimate` and `Counter.fallback` why.

Loading a vocabulary takes seconds and a hundred megabytes or more (README, "Token counts"), so
it is loaded lazily, on the first `count`, and `count` must run off the Trio thread
(`trio.to_thread.run_sync`; `observe.telemetry` does). The texts counted are what the model is
given, as JSON (`dumps`, compact, the way a client sends them on).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

import structlog

from tfunnel.config.model import TokenCounter

log = structlog.get_logger("tfunnel.tokens")

ESTIMATE = "estimate"
# Bytes per token of the estimate.
BYTES_PER_TOKEN = 4


def estimate(text: str) -> int:
    """`ceil(UTF-8 bytes / 4)`: 0 for the empty text."""
    return -(-len(text.encode("utf-8", errors="surrogatepass")) // BYTES_PER_TOKEN)


def dumps(value: Any) -> str:
    """`value` as the JSON text a client hands its model (compact, non-ASCII kept)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


Loader = Callable[[str], Callable[[str], int]]


def bpe_loader(encoding: str) -> Callable[[str], int]:
    """`bpe_openai`'s encoder of `encoding`, as a count (raises whatever the import raises)."""
    import bpe_openai  # seconds and ~100 MB: only when a vocabulary is asked for

    encoder = bpe_openai.get_encoding(encoding)

    def count(text: str) -> int:
        return len(encoder.encode(text))

    return count


class Counter:
    """One token counter, chosen by name; thread-safe (the vocabulary loads once, under a lock)."""

    def __init__(self, choice: TokenCounter, loader: Loader = bpe_loader) -> None:
        self.choice = choice
        self._loader = loader
        self._lock = threading.Lock()
        self._count: Callable[[str], int] | None = estimate if choice == ESTIMATE else None
        self.fallback: str | None = None

    @property
    def name(self) -> str:
        """The counter in use: the vocabulary chosen, or `estimate` (chosen, or fallen back to)."""
        return ESTIMATE if self.choice == ESTIMATE or self.fallback is not None else self.choice

    @property
    def loaded(self) -> bool:
        return self._count is not None

    def count(self, text: str) -> int:
        """The tokens of `text`. Blocking (the first call loads the vocabulary): never on the Trio
        thread."""
        counter = self._count
        if counter is None:
            with self._lock:
                counter = self._count
                if counter is None:
                    counter = self._count = self._load()
        return counter(text)

    def _load(self) -> Callable[[str], int]:
        try:
            return self._loader(self.choice)
        except Exception as exc:  # a missing or broken package: the estimate, said once
            self.fallback = f"{type(exc).__name__}: {exc}"
            log.warning("token vocabulary unavailable; counting by the estimate", tokens=self.choice,
                        error=self.fallback)
            return estimate
