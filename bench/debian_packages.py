"""Finding a Debian package by what it does, as a BEIR-layout collection, for evaluation only.

    apt-get -o Acquire::Languages=en update
    lz4cat /var/lib/apt/lists/*_debian_dists_bookworm_main_i18n_Translation-en.lz4 > Translation-en
    python bench/debian_packages.py Translation-en OUT_DIR [--documents 10000] [--queries 1000]

Any other language's translation file works the same (`Acquire::Languages=ja`, `Translation-ja`;
the language is read from the file's `Description-<language>` fields): the Japanese and Chinese
ones make collections whose words are not separated by spaces.

Every Debian package has a one-line synopsis ("Real-time strategy game of ancient warfare") and a
long description of a few sentences, written by its maintainer. A person looking for a package
asks in a line like the synopsis; the package is found by its name and its long description. So:

* corpus: packages drawn at random (`--documents`, `--seed`), each `{title: its name, text: its
  long description}` (paragraphs kept, list markers and spaces as written). An entity search:
  short titles, short texts, many near neighbours (a library, its `-dev` and `-doc` packages).
  A package with no long description, or whose long description another package also has (the
  parts of one source: `0ad-data` and `0ad-data-common` say the same), is not drawn: its
  description cannot tell it from the others, so a judgement of one against the rest would be
  noise;
* queries: the synopses of `--queries` of the drawn packages, of at least 3 words, and only a
  synopsis no other package in the file has;
* judgements: each synopsis's own package, gain 1.

Nothing here downloads anything (apt does, by hand, at development time), and none of it is
shipped with the product: keep OUT_DIR outside the repository (e.g. `/work/datasets/debian`).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import regex

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.classic_collections import Converted, write_beir

MIN_QUERY_WORDS = 3
MIN_QUERY_CJK_CHARACTERS = 6
"""A synopsis in a language written without spaces (Chinese, Japanese) is long enough to ask
with at least this many of its characters: about three words."""
_CJK = regex.compile(r"[\p{Han}\p{Hiragana}\p{Katakana}\p{Hangul}]")


class Package(NamedTuple):
    name: str
    synopsis: str
    description: str
    """The long description, its paragraphs separated by a blank line."""


def packages(translation: str) -> Iterator[Package]:
    """The packages of a `Translation-<language>` file (deb822 stanzas), in file order."""
    for stanza in translation.split("\n\n"):
        name, description, field = "", [], ""
        for line in stanza.split("\n"):
            if line.startswith((" ", "\t")):
                if _is_description(field):
                    description.append(line[1:])
                continue
            field, _, value = line.partition(":")
            if field == "Package":
                name = value.strip()
            elif _is_description(field):
                description = [value.strip()]
        if name and description:
            yield Package(name, " ".join(description[0].split()), _paragraphs(description[1:]))


def _is_description(field: str) -> bool:
    """`Description-<language>`, the translated synopsis and long description (not its md5)."""
    return field.startswith("Description-") and field != "Description-md5"


def _paragraphs(lines: list[str]) -> str:
    """deb822's long description: a line " ." is a blank line between paragraphs."""
    paragraphs: list[list[str]] = [[]]
    for line in lines:
        if line.strip() == ".":
            paragraphs.append([])
        else:
            paragraphs[-1].append(line.rstrip())
    return "\n\n".join("\n".join(p).strip() for p in paragraphs if any(s.strip() for s in p))


def debian_packages(translation: str, documents: int, queries: int, seed: int) -> Converted:
    """(corpus, queries, judgements): see the module's docstring."""
    every = list({p.name: p for p in packages(translation)}.values())
    told = Counter(p.description for p in every)
    synopses = Counter(p.synopsis.lower() for p in every)
    drawable = [p for p in every if p.description and told[p.description] == 1]
    draw = random.Random(seed)
    corpus = sorted(draw.sample(drawable, min(documents, len(drawable))))
    askable = [p for p in corpus if synopses[p.synopsis.lower()] == 1 and long_enough(p.synopsis)]
    asked = sorted(draw.sample(askable, min(queries, len(askable))))
    return (
        [{"_id": p.name, "title": p.name, "text": p.description} for p in corpus],
        [{"_id": f"q{n}", "text": p.synopsis} for n, p in enumerate(asked, start=1)],
        [(f"q{n}", p.name, 1) for n, p in enumerate(asked, start=1)],
    )


def long_enough(synopsis: str) -> bool:
    """At least `MIN_QUERY_WORDS` words, or `MIN_QUERY_CJK_CHARACTERS` characters of a language
    written without spaces."""
    return (
        len(synopsis.split()) >= MIN_QUERY_WORDS
        or len(_CJK.findall(synopsis)) >= MIN_QUERY_CJK_CHARACTERS
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "translation", type=Path, help="a Translation-<language> file, decompressed"
    )
    parser.add_argument("out", type=Path, help="where the BEIR layout is written")
    parser.add_argument("--documents", type=int, default=10_000, help="packages drawn")
    parser.add_argument("--queries", type=int, default=1000, help="judged synopses drawn")
    parser.add_argument("--seed", type=int, default=31, help="seed of the draws")
    args = parser.parse_args()
    text = args.translation.read_text(encoding="utf-8")
    counts = write_beir(args.out, *debian_packages(text, args.documents, args.queries, args.seed))
    print(json.dumps({"collection": "debian-packages", **counts}))


if __name__ == "__main__":
    main()
