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
  (`столицы` -> `столиц`), lower-cased; in a collection set to Serbian, its Serbian stem (which
  Serbian words written in the Latin alphabet share).

* **Words of a language other than English**: every keyword index stems words with the English
  Snowball stemmer, which leaves `Häuser` and `Haus` apart. A collection set to another language
  (`search_tool.keyword.language`, `collection_languages`; any Snowball stemmer) has its words of
  every other script stemmed with that language's stemmer first (`häuser` -> `haus`), lower-cased.
  KEYWORD nDCG@10 on Debian's German, French and Spanish descriptions (README, "Collections in
  other languages").

`keyword_form` is applied to both sides alike: to the text a chunk's keyword index holds
(`ChunkRecord.indexed_text`) and to a query's keyword text (`EngineQuery.keyword_query`), so every
engine sees the same terms; and to the sentences and questions the `extractive` answerer compares
(in the language the agent names for the collection, English when it names none). In English, the
default, text without CJK or Cyrillic is returned unchanged, byte for byte, so nothing else any
index holds or any query matches changes. KEYWORD nDCG@10 on Debian's translated package
descriptions: Chinese 0.449 -> 0.824, Japanese 0.398 -> 0.734, Korean 0.581 -> 0.717 (pairs);
Russian, Ukrainian and Serbian each gained with the stems (README, "Collections in other
languages")."""

from __future__ import annotations

import threading

import regex
import Stemmer

FORM = "cjk-pairs+cyrillic-stems"
"""Names this form in the fingerprint of a document it rewrites (`ingest`, `form_of`): a document
stored before the form existed, or under another one, is rewritten when it is sent again."""
ENGLISH = "english"
"""The language every keyword index stems itself: text in it is left to the index."""
LANGUAGES: frozenset[str] = frozenset(Stemmer.algorithms()) - {"porter", "dutch_porter"}
"""The languages a collection's words can be stemmed in: Snowball's (PyStemmer's) stemmers."""
_REWRITTEN = regex.compile(
    r"(?P<cjk>[\p{Han}\p{Hiragana}\p{Katakana}\p{Hangul}\u30fc\uff70]+)|(?P<cyrillic>\p{Cyrillic}+)"
)
"""A run of characters of the scripts written without spaces between words (U+30FC and its
half-width form U+FF70, the prolonged sound mark `ー`, belong to no script yet sit inside Katakana
words), or a run of Cyrillic letters."""
_IN_A_LANGUAGE = regex.compile(_REWRITTEN.pattern + r"|(?P<word>[\p{Alphabetic}\p{M}]+)")
"""`_REWRITTEN`, and a run of letters of any other script (stemmed in the collection's language)."""
_WORD_CHARACTER = regex.compile(r"[\p{Alphabetic}\p{N}]")
_LETTER = regex.compile(r"\p{Alphabetic}")


def rewrites(text: str, language: str = ENGLISH) -> bool:
    """Whether `keyword_form` changes `text`'s terms: it holds a CJK or Cyrillic character, or, in
    a language other than English, a letter."""
    if language != ENGLISH:
        return _LETTER.search(text) is not None
    return not text.isascii() and _REWRITTEN.search(text) is not None


def form_of(text: str, language: str = ENGLISH) -> str | None:
    """The name of the form `text`'s keyword terms are in, for a document's fingerprint (`ingest`):
    None where they are `text`'s own."""
    if not rewrites(text, language):
        return None
    return FORM if language == ENGLISH else f"{FORM}+{language}-stems"


def keyword_form(text: str, language: str = ENGLISH) -> str:
    """`text` with each run of CJK characters replaced by its overlapping character pairs and each
    Cyrillic word by its stem, separated by spaces from a letter or digit next to them; in a
    `language` other than English, each word of any other script by its stem in that language.
    Unchanged when `rewrites` says so. A language must be one of `LANGUAGES` (KeyError)."""
    if language == ENGLISH:
        if text.isascii():
            return text
        runs, words = _REWRITTEN, None
    else:
        runs, words = _IN_A_LANGUAGE, stemmer(language)
    cyrillic = _cyrillic_stemmer(language)
    rewritten: str = runs.sub(lambda run: _rewritten(run, text, words, cyrillic), text)
    return rewritten


def _rewritten(
    run: regex.Match[str],
    text: str,
    words: Stemmer.Stemmer | None,
    cyrillic: Stemmer.Stemmer,
) -> str:
    """One run's form: a word of another script its stem (`words`: the collection's language's
    stemmer), a Cyrillic word its stem, a CJK run its character pairs (PyStemmer caches stems)."""
    characters = run.group()
    if words is not None and run.lastgroup == "word":
        stem: str = words.stemWord(characters.lower())
        return stem  # a word: nothing beside it to split from
    if run.group("cyrillic") is not None:
        form: str = cyrillic.stemWord(characters.lower())
    elif len(characters) == 1:
        form = characters
    else:
        form = " ".join(characters[i : i + 2] for i in range(len(characters) - 1))
    start, end = run.span()
    before = " " if start > 0 and _WORD_CHARACTER.match(text[start - 1]) else ""
    after = " " if end < len(text) and _WORD_CHARACTER.match(text[end]) else ""
    return f"{before}{form}{after}"


CYRILLIC_LANGUAGES = frozenset({"russian", "serbian"})
"""The languages whose Snowball stemmer reads Cyrillic (Serbian's also reads its Latin alphabet,
and stems both to one form). Cyrillic in a collection of any other language is stemmed as
Russian: Ukrainian and Serbian collections gained with it (session 18)."""


def _cyrillic_stemmer(language: str) -> Stemmer.Stemmer:
    return stemmer(language if language in CYRILLIC_LANGUAGES else "russian")


_PER_THREAD = threading.local()


def stemmer(language: str) -> Stemmer.Stemmer:
    """This thread's Snowball stemmer of `language` (one of `LANGUAGES`, else KeyError). A
    PyStemmer stemmer holds state and must be used by one thread at a time: ingest stems in
    worker threads while searches stem on the event loop, so each thread keeps its own."""
    held: dict[str, Stemmer.Stemmer] | None = getattr(_PER_THREAD, "stemmers", None)
    if held is None:
        held = _PER_THREAD.stemmers = {}
    found = held.get(language)
    if found is None:
        if language not in LANGUAGES:
            raise KeyError(f"no stemmer for the language {language!r}")
        found = held[language] = Stemmer.Stemmer(language)
    return found
