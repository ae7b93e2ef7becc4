"""BM25 as the embedded engine scores it, for an engine that keeps its own term statistics.

The embedded engine's keyword side is LanceDB's native full-text index with the product's
tokenizer (`lancedb.index.FTS()` defaults, `engine/lancedb/indexes.py`): a *simple* tokenizer
(maximal runs of alphanumeric characters), tokens of 40 UTF-8 bytes or more dropped, lower case,
English Snowball stemming, then English stop words removed, then ASCII folding; and Lance's BM25:

    score(d, q) = sum over distinct query terms t of  idf(t) * (k1 + 1) * f / (f + k1 * norm(d))
    idf(t)      = ln((N - n(t) + 0.5) / (n(t) + 0.5) + 1)
    norm(d)     = 1 - b + b * |d| / avgdl,   k1 = 1.2, b = 0.75

with `f` the term's count in the chunk, `|d|` the chunk's token count, `N` the chunks of the
collection, `n(t)` the chunks holding `t` and `avgdl` the mean token count (Lance counts only
chunks holding a term in `N` and `avgdl`; so do the keyword index held in memory,
`engine/keyword_index.py`, and the PostgreSQL engine: `termless_count`). This module is the
tokenizer and those formulas; the PostgreSQL engine stores each chunk's term counts and keeps `N`,
the token total and every `n(t)` up to date in the same transaction as the write
(`engine/postgres/schema.py`). `tests/search_tool/test_keyword_index.py` and
`test_postgres_engine.py` check both against LanceDB itself.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache

import regex
import Stemmer

from services.common.keyword_form import ENGLISH, stemmer

K1 = 1.2
B = 0.75
MAX_TOKEN_BYTES = 40
"""Tokens of this many UTF-8 bytes or more are dropped (Lance's `max_token_length`)."""

_STOP_WORD_TEXT = """
i me my myself we our ours ourselves you your yours yourself yourselves he him his himself she her
hers herself it its itself they them their theirs themselves what which who whom this that these
those am is are was were be been being have has had having do does did doing a an the and but if
or because as until while of at by for with about against between into through during before
after above below to from up down in out on off over under again further then once here there
when where why how all any both each few more most other some such no nor not only own same so
than too very s t can will just don should now d ll m o re ve y ain aren couldn didn doesn hadn
hasn haven isn ma mightn mustn needn shan shouldn wasn weren won wouldn
"""
ENGLISH_STOP_WORDS = frozenset(_STOP_WORD_TEXT.split())
"""Tantivy's English stop words (Snowball's list), removed *after* stemming as Lance does: so
`being` (stem `be`) is removed and `does` (stem `doe`) is kept. Checked word by word against
LanceDB (`tests/search_tool/test_postgres_engine.py`)."""

_WORD = regex.compile(r"[\p{Alphabetic}\p{Nd}\p{Nl}\p{No}]+")
"""Maximal runs of alphanumeric characters as Rust's `char::is_alphanumeric` has them (tantivy's
SimpleTokenizer): Unicode's Alphabetic property (letters, and the vowel signs of Indic scripts,
circled letters ...) or a numeric category. Python's own word class splits `भाषा` after `भ`."""
_ASCII_WORD = re.compile(r"[A-Za-z0-9]+")
"""The same in an ASCII text, at `re`'s speed."""


def _words(text: str) -> list[str]:
    words: list[str] = (_ASCII_WORD if text.isascii() else _WORD).findall(text)
    return words


_FOLDED = {
    "ß": "ss",
    "æ": "ae",
    "œ": "oe",
    "ø": "o",
    "đ": "d",
    "ð": "d",
    "þ": "th",
    "ł": "l",
    "ħ": "h",
    "ı": "i",
    "ŀ": "l",
    "ŧ": "t",
    "\u2044": "",
}
"""Letters ASCII folding maps that Unicode decomposition does not; and the fraction slash that
decomposing a vulgar fraction gives is dropped (LanceDB's index holds `¼` as `14`)."""


def _stemmer() -> Stemmer.Stemmer:
    return stemmer(ENGLISH)  # this thread's: a stemmer is used by one thread at a time


def _fold(token: str) -> str:
    if token.isascii():
        return token
    return "".join(_folded_letter(c) for c in token)


@lru_cache(maxsize=8192)
def _folded_letter(letter: str) -> str:
    """A letter as ASCII folding leaves it: its decomposition without accents when that is ASCII
    (`é` -> `e`, `ﬁ` -> `fi`, `²` -> `2`), else the letter itself (`µ` stays the micro sign, not
    Greek `μ`; `й` stays `й`), as Lucene's and tantivy's folding, which map only to ASCII.
    Checked letter by letter against LanceDB (`tests/search_tool/test_keyword_index.py`)."""
    if letter in _FOLDED:
        return _FOLDED[letter]
    decomposed = unicodedata.normalize("NFKD", letter)
    stripped = "".join(_FOLDED.get(c, c) for c in decomposed if not unicodedata.combining(c))
    # ASCII, in lower case (the letter was lower cased before folding: `ℌ` gives `H`, which the
    # folding leaves alone) and not empty (a combining mark alone, `ۡ`, is kept: folding keeps
    # what it does not map)
    folded = stripped and stripped.isascii() and stripped == stripped.lower()
    return stripped if folded else letter


def tokens(text: str) -> list[str]:
    """The terms of `text` in order, as the embedded engine's index makes them."""
    words = [w.lower() for w in _words(text) if len(w.encode("utf-8")) < MAX_TOKEN_BYTES]
    stemmed = _stemmer().stemWords(words)
    return [_fold(t) for t in stemmed if t not in ENGLISH_STOP_WORDS]


def many_term_counts(
    texts: Iterable[str], terms: dict[str, str] | None = None
) -> list[Counter[str]]:
    """Each text's terms and how often each occurs: `Counter(tokens(text))` for every text, at
    twice its speed over a collection (each distinct word is stemmed once, an ASCII text is lower
    cased whole: lower casing an ASCII word never changes its length or its characters' class).
    `terms` (each word as found, lower cased in an ASCII text -> its term, '' when dropped) is
    the word cache to use and fill, for texts counted in batches."""
    stem = _stemmer().stemWord
    terms = {} if terms is None else terms
    counted: list[Counter[str]] = []
    for text in texts:
        words = Counter(_words(text.lower() if text.isascii() else text))
        found: Counter[str] = Counter()
        for word, count in words.items():
            term = terms.get(word)
            if term is None:
                term = ""
                if len(word.encode("utf-8")) < MAX_TOKEN_BYTES:
                    stemmed = stem(word.lower())
                    term = "" if stemmed in ENGLISH_STOP_WORDS else _fold(stemmed)
                terms[word] = term
            if term:
                found[term] += count
        counted.append(found)
    return counted


@dataclass(frozen=True)
class TermCounts:
    """What the index keeps of one chunk's keyword text."""

    counts: Mapping[str, int]
    """Each distinct term and how often it occurs."""
    length: int
    """Tokens in all (`|d|`)."""


def term_counts(text: str) -> TermCounts:
    """The term counts and length of one chunk's keyword text."""
    found = tokens(text)
    return TermCounts(Counter(found), len(found))


def query_terms(text: str) -> Counter[str]:
    """The terms of a query and how often each occurs: a repeated word counts again, as in
    Lance (`alpha alpha` scores twice `alpha`)."""
    return Counter(tokens(text))


def idf(documents_with_term: int, documents: int) -> float:
    """Lance's BM25 idf; 0 for a term no chunk holds."""
    if documents_with_term <= 0:
        return 0.0
    return math.log((documents - documents_with_term + 0.5) / (documents_with_term + 0.5) + 1.0)


def weights(
    terms: Mapping[str, int], document_frequencies: Mapping[str, int], documents: int
) -> dict[str, float]:
    """Each query term's weight: its idf times its count in the query (terms no chunk holds are
    left out: they score nothing)."""
    return {
        term: idf(document_frequencies.get(term, 0), documents) * count
        for term, count in terms.items()
        if document_frequencies.get(term, 0) > 0
    }


def score(
    counts: Mapping[str, int], length: int, term_weights: Mapping[str, float], avgdl: float
) -> float:
    """BM25 of one chunk (the formula the engine's SQL computes; used by tests)."""
    norm = K1 * (1.0 - B + B * length / avgdl) if avgdl > 0 else K1
    total = 0.0
    for term, weight in term_weights.items():
        f = counts.get(term, 0)
        if f:
            total += weight * (K1 + 1.0) * f / (f + norm)
    return total
