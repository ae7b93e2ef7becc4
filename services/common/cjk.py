"""Chinese, Japanese and Korean text made searchable by word-based keyword scoring.

Every keyword tokenizer in Quarry splits text where a character is not a letter or a digit:
LanceDB's *simple* tokenizer (whose BM25 the embedded, PostgreSQL and in-memory keyword indexes
mirror, `search_tool/engine/bm25.py`), Vespa's, and the offline `extractive` answerer's. Chinese and
Japanese are written without spaces, so a whole sentence is one such "word": LanceDB drops it
outright once it reaches 40 bytes (14 characters), and a shorter one matches only a query that is
exactly that run of characters. A Japanese query found nothing in a Japanese text it occurs in.

`bigrams` rewrites each run of Han, Hiragana, Katakana or Hangul characters as its overlapping
pairs of characters, separated by spaces (`東京都の` -> `東京 京都 都の`; a lone character stays
as it is), the way Lucene's `CJKBigramFilter` and Elasticsearch's `cjk` analyzer index these
scripts without a dictionary. It is applied to both sides alike: to the text a chunk's keyword index
holds (`ChunkRecord.indexed_text`) and to a query's keyword text (`EngineQuery.keyword_query`), so
every engine sees the same terms; and to the sentences and questions the `extractive` answerer
compares. Text without those scripts is returned unchanged, byte for byte, so nothing else any
index holds or any query matches changes.
"""

from __future__ import annotations

import regex

_RUN = regex.compile(r"[\p{Han}\p{Hiragana}\p{Katakana}\p{Hangul}\u30fc\uff70]+")
"""A run of characters of the scripts written without spaces between words (Korean's words are
spaced, but its particles and compounds run together, so Hangul is paired too). U+30FC and its
half-width form U+FF70 (the prolonged sound mark, `ー`) belong to no script yet sit inside
Katakana words."""
_WORD_CHARACTER = regex.compile(r"[\p{Alphabetic}\p{N}]")


def present(text: str) -> bool:
    """Whether `text` holds a character `bigrams` rewrites."""
    return not text.isascii() and _RUN.search(text) is not None


def bigrams(text: str) -> str:
    """`text` with each run of CJK characters replaced by its overlapping character pairs,
    separated by spaces (and from a letter or digit next to the run). Idempotent in the terms a
    tokenizer finds; unchanged when `text` holds no CJK character."""
    if text.isascii():
        return text
    paired: str = _RUN.sub(lambda run: _paired(run, text), text)
    return paired


def _paired(run: regex.Match[str], text: str) -> str:
    characters = run.group()
    pairs = (
        characters
        if len(characters) == 1
        else " ".join(characters[i : i + 2] for i in range(len(characters) - 1))
    )
    start, end = run.span()
    before = " " if start > 0 and _WORD_CHARACTER.match(text[start - 1]) else ""
    after = " " if end < len(text) and _WORD_CHARACTER.match(text[end]) else ""
    return f"{before}{pairs}{after}"
