"""First-sight poisoning check for upstream descriptors (pure).

Trust on first use trusts whatever an upstream lists first, so before a descriptor is pinned it is
inspected for hidden or steering content: invisible or reordering characters, controls, text aimed
at the model rather than describing the tool, instructions to read secrets or send data away,
oversized text, and names that shadow what the model already sees. A finding quarantines the item
until an operator accepts it; this module only decides.

`inspect` never raises for any JSON-shaped input; it imports no I/O and no trio. Every pattern is a
flat alternation or a single bounded gap (`[^\\n]{0,N}`): no nested quantifiers, so matching is
linear in the text with a constant factor of at most N.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal

Kind = Literal["tool", "prompt", "template", "instructions"]

# A tool/prompt/template description is a paragraph or two; the longest in the servers we test
# against is ~300 chars. 4 KiB leaves room for a careful manual and still stops a page of hidden
# text scrolled out of the operator's view.
DESCRIPTION_LIMIT = 4096
# Server instructions are a whole usage guide (server-everything's is ~1.6 KB).
INSTRUCTIONS_LIMIT = 16384
# All strings of one descriptor together: big enough for a rich inputSchema with enums.
TOTAL_LIMIT = 64 * 1024
# How far a rule looks between two parts of one phrase ("do not mention <...> to the user").
_GAP = 80
# Subtrees that never reach the model as text: icons carry (big) data URIs, _meta is for clients.
_SKIPPED_KEYS = frozenset({"icons", "_meta"})
_DETAIL_LIMIT = 200
_SUMMARY_LIMIT = 300
_ELLIPSIS = "\u2026"
_PATH_LIMIT = 200


@dataclass(frozen=True)
class Finding:
    rule: str    # stable id from RULES, e.g. "invisible-unicode"
    field: str   # where: "description", "inputSchema.properties.path.description", "instructions"
    detail: str  # one line, safe to print: no raw control/invisible characters, <= 200 chars


# --- characters -----------------------------------------------------------------------------------

_TAGS = "\U000e0000-\U000e007f"
_VS = "\ufe00-\ufe0f\U000e0100-\U000e01ef"
_BIDI = "\u202a-\u202e\u2066-\u2069\u200e\u200f\u061c"
# Default-ignorable code points outside category Cf (combining grapheme joiner, Hangul fillers,
# Khmer inherent vowels, Mongolian free variation selectors).
_IGNORABLE = "\u034f\u115f\u1160\u17b4\u17b5\u180b-\u180f\u3164\uffa0"
# Cf characters that print something (Arabic/Kaithi number signs), so hide nothing.
_VISIBLE_CF = frozenset("\u0600\u0601\u0602\u0603\u0604\u0605\u06dd\u070f\u08e2\U000110bd\U000110cd")
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
_BIDI_RE = re.compile(f"[{_BIDI}]")
# Candidates for invisible-unicode; Cf and private use are checked per character below.
_INVISIBLE_CANDIDATE = re.compile(f"[{_TAGS}{_VS}{_IGNORABLE}\u00ad\u200b-\u200d\u2060-\u2064\ufeff"
                                  "\u206a-\u206f\ufff9-\ufffb\u180e\ue000-\uf8ff"
                                  "\U000f0000-\U000ffffd\U00100000-\U0010fffd]")
# An emoji subdivision flag (England, Scotland, Wales): black flag, 1-7 tag letters, cancel tag.
_FLAG_TAGS = re.compile("\U0001f3f4[\U000e0030-\U000e0039\U000e0061-\U000e007a]{1,7}\U000e007f")
_VS_RUNS = re.compile(f"[{_VS}]+")
_CJK = re.compile("[\u3400-\u9fff\uf900-\ufaff\U00020000-\U0003ffff]")


def _cp(ch: str) -> str:
    return f"U+{ord(ch):04X}"


def printable(text: str, limit: int = _DETAIL_LIMIT) -> str:
    """`text` on one line with every non-printing or invisible character as U+XXXX, cut to `limit`:
    safe for a terminal and a log (no escape sequence, no reordering, nothing hidden)."""
    out: list[str] = []
    size = 0
    for ch in text:
        piece = ch if ch.isprintable() and not _INVISIBLE_CANDIDATE.match(ch) else _cp(ch)
        if size + len(piece) > limit - 1:
            out.append(_ELLIPSIS)
            break
        out.append(piece)
        size += len(piece)
    return "".join(out)


def _joiner_is_legit(text: str, i: int) -> bool:
    """ZWJ/ZWNJ between emoji (a ZWJ sequence) or between letters of a non-Latin script (Persian
    and Indic orthography need them); anywhere else they only hide or split words."""
    if i == 0 or i + 1 >= len(text):
        return False
    before, after = text[i - 1], text[i + 1]
    emoji_before = (unicodedata.category(before) == "So" or before == "\ufe0f"
                    or "\U0001f3fb" <= before <= "\U0001f3ff")  # skin-tone modifiers
    if emoji_before and unicodedata.category(after) == "So":
        return True
    return all(ord(c) > 0x58F and unicodedata.category(c)[0] in "LM" for c in (before, after))


def _hidden_chars(text: str) -> list[str]:
    """The invisible characters of `text` that are not legitimately needed."""
    if text.isascii():  # every invisible character (and every format character) is beyond ASCII
        return []
    text = _FLAG_TAGS.sub("", text)
    found: list[str] = []
    for m in _INVISIBLE_CANDIDATE.finditer(text):
        ch, i = m.group(), m.start()
        if ch in "\u200c\u200d" and _joiner_is_legit(text, i):
            continue
        if ch == "\ufeff" and i == 0:
            continue  # a byte order mark that survived decoding
        if not _VS_RUNS.match(ch):  # variation selectors are judged below, run by run
            found.append(ch)
    for m in _VS_RUNS.finditer(text):
        run, i = m.group(), m.start()
        if len(run) == 1 and (run in "\ufe00\ufe0e\ufe0f" or (i > 0 and _CJK.match(text[i - 1]))):
            continue  # text/emoji presentation, or an ideographic variation sequence after a CJK ideograph
        found.extend(run)  # a run carries data (emoji smuggling); one selector is at most a bit
    found += [ch for ch in text if unicodedata.category(ch) == "Cf" and ch not in _VISIBLE_CF
              and not _BIDI_RE.match(ch) and not _INVISIBLE_CANDIDATE.match(ch)]
    return found


def _tag_text(text: str) -> str:
    """What Unicode tag characters spell, decoded to ASCII (the tag-smuggling channel)."""
    if text.isascii():
        return ""
    return "".join(chr(ord(c) - 0xE0000) for c in text if "\U000e0020" <= c <= "\U000e007e")


# --- normalising text before matching -----------------------------------------------------------

# Cheap confusables fold: Cyrillic and Greek letters that look like Latin ones, typographic quotes,
# and (for names) digits that pass for letters. Applied after casefold, so lower case only.
_CONFUSABLES = str.maketrans({
    "\u0430": "a", "\u0432": "b", "\u0435": "e", "\u0451": "e", "\u0456": "i", "\u0457": "i",
    "\u0458": "j", "\u043a": "k", "\u043c": "m", "\u043d": "h", "\u043e": "o", "\u0440": "p",
    "\u0441": "c", "\u0442": "t", "\u0443": "y", "\u0445": "x", "\u0455": "s", "\u0501": "d",
    "\u051b": "q", "\u051d": "w", "\u04bb": "h", "\u0261": "g", "\u0131": "i", "\u03b1": "a",
    "\u03b2": "b", "\u03b5": "e", "\u03b9": "i", "\u03ba": "k", "\u03bd": "v", "\u03bf": "o",
    "\u03c1": "p", "\u03c4": "t", "\u03c5": "u", "\u03c7": "x", "\u03c9": "w",
    "\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"',
})
_NAME_FOLD = str.maketrans({"-": "_", ".": "_", "0": "o", "1": "l"})
_STRIP = re.compile(f"{_INVISIBLE_CANDIDATE.pattern}|[{_BIDI}]")
_SPACES = re.compile(r"[^\S\n]+")
_NEWLINES = re.compile(r" ?\n[\s]*")


def _fold(text: str) -> str:
    """NFKC, invisible characters dropped, casefolded, confusables folded, blanks collapsed."""
    if text.isascii():  # NFKC, the invisible characters and the confusables leave ASCII as it is
        text = text.lower()  # ASCII's casefold
    else:
        text = _STRIP.sub("", unicodedata.normalize("NFKC", text)).casefold().translate(_CONFUSABLES)
    return _NEWLINES.sub("\n", _SPACES.sub(" ", text))


def _name_key(name: str) -> str:
    return _fold(name).strip().translate(_NAME_FOLD)


# --- text patterns ----------------------------------------------------------------------------------

_G = f"[^\\n]{{0,{_GAP}}}"  # the one bounded gap between two parts of a phrase


def _patterns(*alternatives: str) -> re.Pattern[str]:
    """One alternation; a space in a pattern matches any one (collapsed) blank, newline included."""
    return re.compile("|".join(alternatives).replace(" ", r"\s"))


_STEERING = _patterns(
    r"\b(?:ignore|disregard|forget|override)( all| any)?( of)?( the| your)? (?:previous|prior|above|earlier"
    r"|preceding|former|other) (?:instructions|messages|prompts|directions|rules|context)",
    r"\b(?:ignore|disregard|forget|override) (?:all|any|your|the system'?s?) (?:instructions|prompts"
    r"|guidelines|system prompt)",
    r"\b(?:do not|don't|dont|never) (?:tell|inform|mention|reveal|show|disclose|alert|notify)\b"
    + _G + r"\buser\b",
    r"\b(?:do not|don't|dont|never) (?:mention|reveal|disclose) (?:this|that|these|it)\b",
    r"\bwithout (?:telling|informing|asking|notifying|alerting|warning) (?:the )?user",
    r"\bwithout (?:the )?user'?s? (?:knowing|knowledge|noticing|consent)",
    r"\byou (?:must|should|have to|need to) (?:first|always) (?:call|use|invoke|run|read|execute|send)\b",
    r"<\s?/?\s?(?:important|system|instructions?|secret|hidden|admin|assistant|user_?instructions?)\s?>",
    r"\[/?(?:system|important|inst)\]|<\|(?:im_start|system|im_end)\|>",
    r"\b(?:your|ignore the|reveal the|reveal your|override the|override your) system (?:prompt|message"
    r"|instructions)",
    r"\bthis is (?:very |extremely |really |critically )?(?:important|critical|crucial) ?[:!]",
    r"\bas an ai\b|\bas a language model\b|(?:^|\n)(?:assistant|system) ?:",
    r"\bbefore (?:using|calling|invoking|running) (?:this|the|any) tool\b" + _G
    + r"\b(?:read|open|cat|fetch|load|access)\b",
)
# Files whose contents are secrets; a mention needs a base-form verb before it (an instruction to
# the model: "read ~/.ssh/id_rsa"), because a tool describing itself speaks in the third person
# ("Reads .env files of the project") and a default value is not an instruction at all.
_SECRET_PATH = (r"(?:~/\.ssh|\.ssh/|\bid_(?:rsa|dsa|ecdsa|ed25519)\b|\.aws/credentials|(?<!\w)\.env\b"
                r"|/etc/passwd|/etc/shadow|\.netrc\b|\.npmrc\b|\.pypirc\b|\.git-credentials|\.docker/config\.json"
                r"|\.kube/config|\.gnupg|\.cursor/mcp\.json|claude_desktop_config\.json|keychain"
                r"|cookies\.sqlite|/cookies\b|/login data\b|wallet\.dat)")
_EXFILTRATION = _patterns(
    r"\b(?:read|open|cat|include|send|pass|attach|upload|copy|fetch|load|access|grab|extract|print"
    r"|output|dump)\b" + _G + _SECRET_PATH,
    r"\b(?:send|post|upload|forward|transmit|exfiltrate|include|email)\b" + _G
    + r"\b(?:to|in)\b ?(?:https?://|ftp://|[\w.+-]{1,64}@[\w-]{1,63}\.\w)",
    # "its" points back at something the model was told to read; "pass the content as `content`"
    # is how a write tool legitimately explains its own parameter.
    r"\b(?:pass|put|include|add|insert|send|provide)\b (?:its|their|that file'?s|the file'?s|those)"
    r" contents? (?:as|in|into|via|through|inside) ",
)


def _quoted(m: re.Match[str] | None) -> str | None:
    return None if m is None else '"' + printable(m.group().strip(), 80) + '"'


# --- per-string predicates: (kind, field, text) -> detail or None ------------------------------------

def _invisible(kind: Kind, field: str, text: str) -> str | None:
    found = _hidden_chars(text)
    if not found:
        return None
    listed = " ".join(_cp(c) for c in dict.fromkeys(found[:8]))
    spelled = _tag_text(_FLAG_TAGS.sub("", text))
    spells = f'tag characters spell "{printable(spelled, 80)}"; ' if spelled else ""
    more = _ELLIPSIS if len(found) > 8 else ""
    return printable(f"{spells}{len(found)} invisible character(s): {listed}{more}")


def _listed(what: str, found: list[str]) -> str | None:
    return f"{len(found)} {what}: {' '.join(dict.fromkeys(map(_cp, found[:8])))}" if found else None


def _bidi(kind: Kind, field: str, text: str) -> str | None:
    return _listed("bidi control(s)", _BIDI_RE.findall(text))


def _control(kind: Kind, field: str, text: str) -> str | None:
    return _listed("control character(s)", _CONTROL.findall(text))


@lru_cache(maxsize=512)  # the steering and the exfiltration rules read each string so
def _matchable(text: str) -> str:
    """The text as the model may read it: folded, with what tag characters spell appended."""
    folded = _fold(text)
    hidden = _tag_text(text)
    return f"{folded}\n{_fold(hidden)}" if hidden else folded


def _steering(kind: Kind, field: str, text: str) -> str | None:
    return _quoted(_STEERING.search(_matchable(text)))


def _exfiltration(kind: Kind, field: str, text: str) -> str | None:
    return _quoted(_EXFILTRATION.search(_matchable(text)))


def _long(kind: Kind, field: str, text: str) -> str | None:
    limit = INSTRUCTIONS_LIMIT if kind == "instructions" else DESCRIPTION_LIMIT
    return f"{len(text)} characters (limit {limit})" if len(text) > limit else None


TextRule = Callable[[Kind, str, str], str | None]
# The rules table: id, what a summary calls it, and the per-string predicate (None: whole-item rule).
RULES: tuple[tuple[str, str, TextRule | None], ...] = (
    ("invisible-unicode", "invisible Unicode", _invisible),
    ("bidi-control", "bidi control characters", _bidi),
    ("control-chars", "control characters", _control),
    ("steering-text", "text aimed at the model", _steering),
    ("exfiltration", "an instruction to read secrets or send data away", _exfiltration),
    ("long-text", "oversized text", _long),
    ("shadows-name", "a name shadowing another", None),
    ("non-ascii-name", "a name that is not plain ASCII", None),
)
_LABELS = {rule: label for rule, label, _ in RULES}


# --- walking a descriptor -----------------------------------------------------------------------------

def _join(path: str, step: str) -> str:
    """A field path one step deeper; past _PATH_LIMIT it stops growing (it is cut for printing
    anyway), so a deeply nested schema costs linear time, not quadratic."""
    if len(path) < _PATH_LIMIT:
        return path + step
    return path if path.endswith(_ELLIPSIS) else path + _ELLIPSIS


def _strings(descriptor: Mapping[str, Any] | str) -> Iterator[tuple[str, str]]:
    """(field, text) for every model-facing string, keys included, in document order.

    Iterative, so a deeply nested schema cannot exhaust the stack.
    """
    if isinstance(descriptor, str):
        yield "instructions", descriptor
        return
    stack: list[tuple[str, Any]] = [("", descriptor)]
    while stack:
        path, value = stack.pop()
        if isinstance(value, str):
            yield path or "(value)", value
        elif isinstance(value, Mapping):
            children: list[tuple[str, Any]] = []
            for key, item in value.items():
                if not isinstance(key, str) or (not path and key in _SKIPPED_KEYS):
                    continue
                child = _join(path, f".{key}" if path else key)
                children.append((child, key))  # a property name is model-facing too
                children.append((child, item))
            stack.extend(reversed(children))
        elif isinstance(value, list | tuple):
            stack.extend(reversed([(_join(path, f"[{i}]"), item) for i, item in enumerate(value)]))


def _name_findings(kind: Kind, descriptor: Mapping[str, Any] | str,
                   others: Mapping[str, str] | None) -> Iterator[Finding]:
    name = descriptor.get("name") if isinstance(descriptor, Mapping) else None
    if kind not in ("tool", "prompt") or not isinstance(name, str) or not name:
        return
    key = _name_key(name)
    for other, owner in (others or {}).items():
        if _name_key(other) != key:
            continue
        if other.casefold() == name.casefold():
            how = f'the same name as "{printable(other, 60)}" ({printable(owner, 60)})'
        else:
            differ = " ".join(dict.fromkeys(_cp(c) for c in name if c not in other))
            how = (f'looks like "{printable(other, 60)}" ({printable(owner, 60)}); '
                   f'differs in {differ or "separators"}')
        yield Finding("shadows-name", "name", printable(how))
        break
    if not re.fullmatch(r"[\x20-\x7e]+", name):
        odd = " ".join(dict.fromkeys(_cp(c) for c in name if not " " <= c <= "~"))
        yield Finding("non-ascii-name", "name", printable(f'"{printable(name, 80)}" has {odd}'))


def inspect(kind: Kind, descriptor: Mapping[str, Any] | str, *,
            others: Mapping[str, str] | None = None) -> tuple[Finding, ...]:
    """`descriptor` is the item as the upstream listed it (a tool/prompt/template dict) or, for
    "instructions", the server's instructions string. `others` maps names the model already sees
    to who owns them (e.g. {"read_file": "upstream 'fs'", "toolfunnel_run_tool": "the gateway"}),
    for the shadowing rule; the caller leaves out the item's own upstream. Deterministic; findings
    in rule-table order, then field order; at most one finding per rule and field."""
    strings = list(_strings(descriptor))
    found: dict[tuple[str, str], Finding] = {}
    for rule, _, predicate in RULES:
        if predicate is None:
            continue
        for field, text in strings:
            if (rule, field) not in found and (detail := predicate(kind, field, text)) is not None:
                found[rule, field] = Finding(rule, printable(field, 120), detail)
    total = sum(len(text) for _, text in strings)
    if total > TOTAL_LIMIT:
        found["long-text", "*"] = Finding("long-text", "(whole descriptor)",
                                          f"{total} characters of text in all (limit {TOTAL_LIMIT})")
    return (*found.values(), *_name_findings(kind, descriptor, others))


def summary(findings: Sequence[Finding]) -> str:
    """One line for a warning/description prefix/error, e.g. 'invisible Unicode in description
    (3 invisible character(s): U+E0041…); text aimed at the model in inputSchema.properties.x.description
    ("ignore previous instructions")'. At most 300 characters, safe to print; "" for no findings."""
    parts = [f"{_LABELS.get(f.rule, f.rule)} in {f.field} ({printable(f.detail, 70)})" for f in findings]
    line = ""
    for i, part in enumerate(parts):
        rest = len(parts) - i - 1
        tail = f" (+{rest} more)" if rest else ""
        candidate = f"{line}; {part}" if line else part
        if len(candidate) + len(tail) <= _SUMMARY_LIMIT:
            line = candidate
        elif not line:
            return printable(part, _SUMMARY_LIMIT - len(tail)) + tail
        else:
            return f"{line} (+{rest + 1} more)"
    return line
