"""The server instructions a client gets: the gateway's own text, then a short section per ready
upstream (pure).

A section is a heading naming the upstream, the operator's `description` of it (expose.json) and
the upstream's own instructions. An upstream's instructions are untrusted text: control
characters are dropped, a line that looks like a heading loses its `#` marks and an underline
line is blanked (so it cannot open a section of its own), and the text is trimmed to `cap`
characters (the description too). All sections together are held
to `TOTAL_FACTOR * cap` characters: sections that do not fit are left out, and one closing line
says how many. A `cap` of 0 leaves every section out.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

TOTAL_FACTOR = 8
TRIM_MARKER = " […]"
HEADING = "## Upstream `{id}`"
INTRO = ("# Upstream servers\n\n"
         "Notes on the upstream MCP servers behind this gateway. Their tools are listed by "
         "toolfunnel_list_tools (named `<upstream>_<tool>` unless renamed) and run with "
         "toolfunnel_run_tool; its `kind` argument lists their prompts and resources, which "
         "are read with prompts/get and resources/read.")
# A whitespace boundary this close to the cap (a fraction of it) is where a trim cuts.
_NEAR = 0.2
# Bidirectional overrides and isolates, and the Unicode line and paragraph separators.
_INVISIBLE = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
_BREAKS = frozenset("\u2028\u2029\u0085")
_HEADING_LIKE = re.compile(r"^[ \t]*#+[ \t]*")
# A line of `=` or `-` alone underlines the line above into a (setext) heading.
_UNDERLINE = re.compile(r"^[ \t]*(?:={2,}|-{2,})[ \t]*$")
_BLANK_RUNS = re.compile(r"\n{3,}")


@dataclass(frozen=True)
class Section:
    """What one ready upstream contributes: its id, the operator's description, its own text."""

    upstream: str
    description: str = ""
    instructions: str = ""


def clean(text: str) -> str:
    """`text` without control characters (newlines kept, tabs as spaces), without a line that
    could pass for a heading, and without runs of blank lines."""
    out: list[str] = []
    for char in text.replace("\r\n", "\n"):
        if char == "\n" or char == "\r" or char in _BREAKS:
            out.append("\n")
        elif char == "\t":
            out.append(" ")
        elif char in _INVISIBLE or unicodedata.category(char) == "Cc":
            continue
        else:
            out.append(char)
    lines = ["" if _UNDERLINE.match(line) else _HEADING_LIKE.sub("", line).rstrip()
             for line in "".join(out).split("\n")]
    return _BLANK_RUNS.sub("\n\n", "\n".join(lines)).strip()


def trim(text: str, cap: int) -> str:
    """`text` cut to at most `cap` characters plus `TRIM_MARKER`: at the last whitespace before
    the cap when one is near it, else at the cap itself. Text within the cap is kept whole."""
    if len(text) <= cap:
        return text
    cut = cap
    space = max(text.rfind(" ", 0, cap + 1), text.rfind("\n", 0, cap + 1))
    if space >= cap - max(1, int(cap * _NEAR)):
        cut = space
    return text[:cut].rstrip() + TRIM_MARKER


def section_text(section: Section, cap: int) -> str:
    """One upstream's section, or "" when it has nothing to say."""
    description = trim(" ".join(clean(section.description).split()), cap)
    instructions = trim(clean(section.instructions), cap)
    if not description and not instructions:
        return ""
    body = [part for part in (description, instructions) if part]
    return "\n\n".join([HEADING.format(id=section.upstream), *body])


def compose(base: str, sections: Sequence[Section], cap: int) -> str:
    """`base`, then a section per upstream that has something to say (in the order given), the
    sections bounded to `TOTAL_FACTOR * cap` characters in all; `cap` 0 gives `base` alone."""
    if cap <= 0:
        return base
    budget = TOTAL_FACTOR * cap
    shown: list[str] = []
    left_out = 0
    for section in sections:
        text = section_text(section, cap)
        if not text:
            continue
        if left_out or len(text) > budget:
            left_out += 1
            continue
        shown.append(text)
        budget -= len(text)
    if not shown and not left_out:
        return base
    parts = [base, INTRO, *shown]
    if left_out:
        parts.append(f"({left_out} more upstream{'s' if left_out > 1 else ''} not described here: "
                     "the size bound of these notes was reached.)")
    return "\n\n".join(parts)
