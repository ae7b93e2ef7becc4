"""Reading the agent's conversation (docs/agent-tool-contract.md) and picking relevant sentences.

Used by the extractive provider: the question and mode from the first user message, the passages
from `search` tool results, and a BM25-style score of each passage sentence against the question.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass

import regex

from services.common.keyword_form import ENGLISH, LANGUAGES, keyword_form
from services.llm_gateway.model import Message, Role

_SECTION = re.compile(r"^## (?P<name>[^\n]+)\n(?P<body>.*?)(?=^## |\Z)", re.MULTILINE | re.DOTALL)
_FOUND = re.compile(r"Found (?P<total>\d+) results?; showing (?P<shown>\d+)\.")
_RESULT = re.compile(
    r"^### \[(?P<id>[^\]\n]+)\] ?(?P<title>[^\n]*)\n(?P<body>.*?)(?=^### \[|\Z)", re.M | re.S
)
_PREVIEW = re.compile(r" … \[preview: \d+ more characters\]\s*$")
FULL_TEXT_HEADING = "Full text of the results"
"""How the agent's message with the full text of previewed results begins."""
_KEYWORD_LANGUAGE = re.compile(r"^keyword language: *(?P<language>\S+) *$", re.MULTILINE)
"""The `## Collection` line naming the language the collection's keyword side stems words in."""
_SENTENCE_END = regex.compile(r"(?<=[.!?])\s+(?=[\"'(\[]?[\p{Lu}\p{N}])|(?<=[。！？])\s*")
"""A sentence ends at `.`, `!` or `?` before a space and a capital or a digit (in any script), or
at a Chinese or Japanese full stop, exclamation or question mark, spaced or not."""
_HEADING_MARKS = re.compile(r"^[ \t]{0,3}#{1,6}(?=[ \t]|$)", re.MULTILINE)
"""The `#`s that open a Markdown heading line."""
_RULE_LINES = re.compile(r"^[ \t]*(?=[^\n]*[-=~^*#]{3})[-=~^*#+|: \t]+$", re.MULTILINE)
"""A line that holds no word, only marks with three of `-=~^*#` in a row: a Markdown or
reStructuredText heading's underline (`=====`, `-----`), a section break (`***`), a table's rules
(`+-----+-----+`, `+=====+=====+`, a simple table's `=====  =====`, a Markdown table's
`|---|:---:|`). The rows of a table keep their words."""
_VERBATIM_OPENINGS = (">>>", "...", "|", "```", "~~~")
"""How an example's, a table's or a fenced block's lines open (`_verbatim_lines`)."""
_WORD = regex.compile(r"[\p{L}\p{N}][\p{L}\p{M}\p{N}'\-]*")
"""A word of any script; Chinese, Japanese and Korean text is compared as character pairs and
Cyrillic words by their stems (`keyword_form`), as the search tool's keyword index compares them."""
_K1 = 1.2
_B = 0.75

_STOPWORD_TEXT = """
a about above after again against all am an and any are as at be because been before being
below between both but by can could did do does doing down during each few for from further
had has have having he her here hers herself him himself his how i if in into is it its
itself just me more most my myself no nor not of off on once only or other our ours
ourselves out over own same she should so some such than that the their theirs them
themselves then there these they this those through to too under until up very was we were
what when where which while who whom why will with would you your yours yourself yourselves
tell explain describe give list show find please know
"""
STOPWORDS = frozenset(_STOPWORD_TEXT.split())


@dataclass(frozen=True)
class AgentQuestion:
    """What the agent asks, read from the first user message."""

    text: str
    """The user's question (`## Query`), or the last user message."""
    thinking: bool
    """`## Mode` starts with THINKING: more than one search is allowed."""
    language: str = ENGLISH
    """The collection's keyword language (`## Collection`), in whose form words are compared:
    a German collection's question meets "Haus" where its passage says "Häuser", as the search
    tool's keyword index does. English when not given, or not a language with a stemmer."""


@dataclass(frozen=True)
class Passage:
    """One search result the model was shown."""

    result_id: str
    text: str
    title: str = ""


@dataclass(frozen=True)
class SearchOutcome:
    """One `search` tool result: how many results it found and the passages it showed."""

    total: int
    passages: tuple[Passage, ...]
    is_error: bool = False


@dataclass(frozen=True)
class Sentence:
    text: str
    result_id: str
    """Result the sentence came from; empty for conversation text that is not a passage."""
    score: float


def read_question(messages: tuple[Message, ...]) -> AgentQuestion:
    """The question under `## Query` of the first user message; else the last user message."""
    users = [m for m in messages if m.role is Role.USER]
    if not users:
        return AgentQuestion(text="", thinking=False)
    parts = sections(users[0].text)
    mode = parts.get("mode", "").strip().upper()
    query = parts.get("query", "").strip()
    return AgentQuestion(
        text=query or users[-1].text.strip(),
        thinking=mode.startswith("THINKING"),
        language=keyword_language(parts.get("collection", "")),
    )


def keyword_language(collection: str) -> str:
    """The language named by a `## Collection` section's `keyword language` line, if it has a
    stemmer; else English."""
    named = _KEYWORD_LANGUAGE.search(collection)
    language = named.group("language").lower() if named else ENGLISH
    return language if language in LANGUAGES else ENGLISH


def read_searches(messages: tuple[Message, ...], tool_name: str = "search") -> list[SearchOutcome]:
    """Results of every `tool_name` call in the conversation, in order."""
    search_ids = {
        call.id
        for m in messages
        if m.role is Role.ASSISTANT
        for call in m.tool_calls
        if call.name == tool_name
    }
    outcomes = []
    for message in messages:
        if message.role is Role.TOOL and message.tool_call_id in search_ids:
            outcomes.append(parse_search_result(message.text, is_error=message.is_error))
    return outcomes


def parse_search_result(text: str, *, is_error: bool = False) -> SearchOutcome:
    """A `search` tool result in the contract's format."""
    if is_error:
        return SearchOutcome(total=0, passages=(), is_error=True)
    found = _FOUND.search(text)
    passages = tuple(
        Passage(
            result_id=m.group("id").strip(),
            text=_PREVIEW.sub("", _passage_text(m.group("body"))),
            title=m.group("title").strip(),
        )
        for m in _RESULT.finditer(text)
    )
    total = int(found.group("total")) if found else len(passages)
    return SearchOutcome(total=total, passages=passages)


def salient_terms(text: str, language: str = ENGLISH) -> list[str]:
    """Lower-case content words of `text` in `language`'s keyword form, first occurrence order,
    stopwords removed."""
    seen: dict[str, None] = {}
    for word in _words(text, language):
        if word not in STOPWORDS and len(word) > 1:
            seen.setdefault(word, None)
    return list(seen)


def rank_sentences(
    question: str, passages: list[Passage], language: str = ENGLISH
) -> list[Sentence]:
    """Every sentence of the passages matching the question, best first (BM25 over sentences),
    their words compared in `language`'s keyword form."""
    terms = salient_terms(question, language)
    candidates = [
        (sentence, passage.result_id)
        for passage in passages
        for sentence in split_sentences(passage.text)
    ]
    if not terms or not candidates:
        return []
    tokenised = [_tokens(sentence, language) for sentence, _ in candidates]
    average = sum(len(t) for t in tokenised) / len(tokenised) or 1.0
    frequency = Counter(term for tokens in tokenised for term in set(tokens))
    ranked = []
    for (sentence, result_id), tokens in zip(candidates, tokenised, strict=True):
        score = _bm25(terms, tokens, frequency, len(tokenised), average)
        if score > 0:
            ranked.append(Sentence(text=sentence, result_id=result_id, score=score))
    ranked.sort(key=lambda s: s.score, reverse=True)
    return _unique(ranked)


def split_sentences(text: str) -> list[str]:
    """The sentences of `text`, its lines joined; a heading's marks are left out (the `#` of a
    Markdown heading, a line of `=====` or `-----` under one) and its words kept: a section's
    first sentence carries its heading, as an API entry's carries its name and signature. Other
    lines of marks alone, a table's rules among them, are left out too (`_RULE_LINES`). Prose
    lines are joined by a space; lines that are read line by line — an interactive example's
    (`>>>`, `...` and its output), a fenced code block's, a table's rows — keep their line
    breaks (`_verbatim_lines`), so an answer quoting them shows them as they were written."""
    flat = _joined(_HEADING_MARKS.sub(" ", _RULE_LINES.sub(" ", text)))
    return [s.strip() for s in _SENTENCE_END.split(flat) if len(s.strip()) > 1]


def _joined(text: str) -> str:
    """`text`'s lines, prose joined by single spaces, verbatim lines on lines of their own (and
    the prose after them on a new line). Where sentences end does not change: an example still
    belongs to the sentence it follows, and its last output line to the sentence after it unless
    a full stop ends the output."""
    flat: list[str] = []
    after_verbatim = False
    for line, verbatim in _verbatim_lines(text):
        if flat:
            flat.append("\n" if verbatim or after_verbatim else " ")
        flat.append(line)
        after_verbatim = verbatim
    return "".join(flat)


def _verbatim_lines(text: str) -> list[tuple[str, bool]]:
    """The non-blank lines of `text`, each with whether it is read line by line: inside a fenced
    code block (its indentation kept, less the fence's), an interactive example's `>>>` or `...`
    line and the output lines after it (up to a blank line), a table's row (`| a | b |`), or a
    reStructuredText literal block: the lines indented under a paragraph that ends with `::`
    (their indentation kept, less the block's first line's). Other lines are prose, their spaces
    collapsed."""
    lines: list[tuple[str, bool]] = []
    fence = ""  # the open fenced block's marks (three backticks or `~~~`), "" outside one
    fence_at = 0  # the open fence's indentation
    example = False
    literal: int | None = None  # the indentation of the `::` paragraph a literal block is under
    block = 0  # the indentation of the literal block's first line
    for raw in text.split("\n"):
        stripped = raw.strip()
        if literal is not None and stripped:
            if _indentation(raw) > literal:
                if block < 0:
                    block = _indentation(raw)
                lines.append((_dedented(raw, block), True))
                continue
            literal = None
        if fence:
            if stripped.startswith(fence):
                fence = ""
                lines.append((stripped, True))
            elif stripped:
                lines.append((_dedented(raw, fence_at), True))
            continue
        if not stripped:
            example = False
            continue
        if stripped.startswith(("```", "~~~")):
            fence, fence_at = stripped[:3], _indentation(raw)
            lines.append((stripped, True))
        elif stripped.startswith(">>>") or (example and stripped.startswith("...")):
            example = True
            lines.append((stripped, True))
        elif example:
            lines.append((stripped, True))
        elif stripped.startswith("|") and stripped.endswith("|"):
            lines.append((" ".join(stripped.split()), True))
        elif stripped.endswith("::"):  # shown as reStructuredText renders it: `text:`
            literal, block = _indentation(raw), -1
            prose = " ".join(stripped.split())
            shown = prose[:-1] if prose[-3:-2].strip() else prose[:-2].rstrip()
            if shown:
                lines.append((shown, False))
        else:
            lines.append((" ".join(stripped.split()), False))
    return lines


def _indentation(line: str) -> int:
    return len(line) - len(line.lstrip())


def _dedented(line: str, indent: int) -> str:
    """`line` less `indent` leading blanks (all of them when it has fewer), less trailing ones."""
    return (line[indent:] if not line[:indent].strip() else line.lstrip()).rstrip()


def ends_verbatim(sentence: str) -> bool:
    """Whether a sentence of `split_sentences` ends in a verbatim line, so that a citation marker
    after it goes on a line of its own, where it cannot be read as the example's output. Its last
    line is taken for prose when it ends as a sentence does and opens as no verbatim line does."""
    if "\n" not in sentence:
        return False
    last = sentence.rsplit("\n", 1)[1]
    return last[-1] not in ".!?:;" or last.startswith(_VERBATIM_OPENINGS)


def join_sentences(parts: list[str]) -> str:
    """Sentences one after another: by a space, or by a line break beside a verbatim line."""
    joined: list[str] = []
    previous = ""
    for part in parts:
        if joined:
            joined.append("\n" if "\n" in part or "\n" in previous else " ")
        joined.append(part)
        previous = part
    return "".join(joined)


def _bm25(
    terms: list[str], tokens: list[str], frequency: Counter[str], count: int, average: float
) -> float:
    counts = Counter(tokens)
    score = 0.0
    for term in terms:
        tf = counts.get(term, 0)
        if not tf:
            continue
        idf = math.log(1 + (count - frequency[term] + 0.5) / (frequency[term] + 0.5))
        score += idf * tf * (_K1 + 1) / (tf + _K1 * (1 - _B + _B * len(tokens) / average))
    return score


def _tokens(text: str, language: str) -> list[str]:
    return [w for w in _words(text, language) if w not in STOPWORDS]


def _words(text: str, language: str) -> list[str]:
    """The lower-case words of `text` in the search tool's keyword form of `language`."""
    words: list[str] = _WORD.findall(keyword_form(text.lower(), language))
    return words


def _unique(sentences: list[Sentence]) -> list[Sentence]:
    seen: set[str] = set()
    unique = []
    for sentence in sentences:
        if sentence.text not in seen:
            seen.add(sentence.text)
            unique.append(sentence)
    return unique


def sections(text: str) -> dict[str, str]:
    """The `## Name` sections of a message, by lower-case name."""
    return {m.group("name").strip().lower(): m.group("body") for m in _SECTION.finditer(text)}


def split_at_last_section(text: str, name: str) -> tuple[str, str]:
    """`text` before its first `## <name>` line, and all of it after that line: for a message
    whose last section holds results, whose texts may have `## ` lines of their own (a Markdown
    file's headings) that `sections` would take for sections."""
    match = re.search(rf"^## {re.escape(name)}[ \t]*$\n?", text, re.MULTILINE | re.IGNORECASE)
    if match is None:
        return text, ""
    return text[: match.start()], text[match.end() :]


def _passage_text(body: str) -> str:
    """The chunk text of one result: the lines after its `source: ...` metadata line."""
    lines = body.strip("\n").split("\n")
    if lines and lines[0].startswith("source:"):
        lines = lines[1:]
    return "\n".join(lines).strip()
