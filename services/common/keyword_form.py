"""Text in scripts whose words the keyword tokenizers cannot match, put in a form they can.

Every keyword tokenizer in Quarry splits text where a character is not a letter or a digit:
LanceDB's *simple* tokenizer (whose BM25 the embedded, PostgreSQL and in-memory keyword indexes
mirror, `search_tool/engine/bm25.py`, English Snowball stemming included), Vespa's, and the offline
`extractive` answerer's. Two kinds of text defeat that:

* **Chinese and Japanese are written without spaces** (Korean spaces its words but runs particles
  and compounds together), so a whole clause is one "word": LanceDB drops it outright once it
  reaches 40 bytes (14 characters), and a shorter one matches only a query that is exactly that run
  of characters. Each run of Han, Hiragana, Katakana or Hangul characters becomes its overlapping
  pairs of characters, separated by spaces (`東京都の` -> `東京 京都 都の`; a lone character
  stays as it is), the way Lucene's `CJKBigramFilter` and Elasticsearch's `cjk` analyzer index
  these scripts without a dictionary.
* **Russian, Ukrainian, Serbian ... inflect their words**, and the English stemmer leaves Cyrillic
  untouched, so `столица` never met `столицы`. Each Cyrillic word becomes its Russian Snowball stem
  (`столицы` -> `столиц`), lower-cased.

`keyword_form` is applied to both sides alike: to the text a chunk's keyword index holds
(`ChunkRecord.indexed_text`) and to a query's keyword text (`EngineQuery.keyword_query`), so every
engine sees the same terms; and to the sentences and questions the `extractive` answerer compares.
Text without those scripts is returned unchanged, byte for byte, so nothing else any index holds or
any query matches changes. KEYWORD nDCG@10 on Debian's translated package descriptions: Chinese
0.449 -> 0.824, Japanese 0.398 -> 0.734, Korean 0.581 -> 0.717 (pairs); Russian, Ukrainian and
Serbian each gained with the stems (README, "Collections in other languages").
"""

from __future__ import annotations

from functools import lru_cache

import regex
import Stemmer

FORM = "cjk-pairs+cyrillic-stems"
"""Names this form in the fingerprint of a document it rewrites (`ingest`): a document stored
before the form existed, or under another one, is rewritten when it is sent again."""
_REWRITTEN = regex.compile(
    r"(?P<cjk>[\p{Han}\p{Hiragana}\p{Katakana}\p{Hangul}\u30fc\uff70]+)|(?P<cyrillic>\p{Cyrillic}+)"
)
"""A run of characters of the scripts written without spaces between words (U+30FC and its
half-width form U+FF70, the prolonged sound mark `ー`, belong to no script yet sit inside Katakana
words), or a run of Cyrillic letters."""
_WORD_CHARACTER = regex.compile(r"[\p{Alphabetic}\p{N}]")


def rewrites(text: str) -> bool:
    """Whether `keyword_form` changes `text`'s terms (it holds a CJK or Cyrillic character)."""
    return not text.isascii() and _REWRITTEN.search(text) is not None


def keyword_form(text: str) -> str:
    """`text` with each run of CJK characters replaced by its overlapping character pairs and each
    Cyrillic word by its stem, separated by spaces from a letter or digit next to them. Finds the
    same terms when applied again; unchanged when `text` holds neither script."""
    if text.isascii():
        return text
    rewritten: str = _REWRITTEN.sub(lambda run: _rewritten(run, text), text)
    return rewritten


def _rewritten(run: regex.Match[str], text: str) -> str:
    characters = run.group()
    if run.group("cyrillic") is not None:
        form: str = _russian().stemWord(characters.lower())  # PyStemmer caches stems itself
    elif len(characters) == 1:
        form = characters
    else:
        form = " ".join(characters[i : i + 2] for i in range(len(characters) - 1))
    start, end = run.span()
    before = " " if start > 0 and _WORD_CHARACTER.match(text[start - 1]) else ""
    after = " " if end < len(text) and _WORD_CHARACTER.match(text[end]) else ""
    return f"{before}{form}{after}"


@lru_cache(maxsize=1)
def _russian() -> Stemmer.Stemmer:
    return Stemmer.Stemmer("russian")
