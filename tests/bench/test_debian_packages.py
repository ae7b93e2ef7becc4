"""Debian's package descriptions become an entity-search collection that `bench/harness.load_beir`
reads: a package's synopsis asks for the package, found by its name and long description."""

from __future__ import annotations

from pathlib import Path

from bench.classic_collections import write_beir
from bench.debian_packages import debian_packages, packages
from bench.harness import load_beir

TRANSLATION = """\
Package: aasvg
Description-md5: 00000000000000000000000000000001
Description-en: Convert ASCII art diagrams   into SVG
 A command line tool to convert ASCII art diagrams into SVG.
 .
 It can be used with xml2rfc
 for generating RFC documents.

Package: game
Description-md5: 00000000000000000000000000000002
Description-en: Real-time strategy game of ancient warfare
 0 A.D. is a real-time strategy game.

Package: game-data
Description-md5: 00000000000000000000000000000003
Description-en: Real-time strategy game (data files)
 0 A.D. is a real-time strategy game.

Package: libfoo-doc
Description-md5: 00000000000000000000000000000004
Description-en: Foo library documentation
 The documentation of the foo library, in HTML.

Package: libbar-doc
Description-md5: 00000000000000000000000000000005
Description-en: Foo library documentation
 The documentation of the bar library, in HTML.

Package: short
Description-md5: 00000000000000000000000000000006
Description-en: Tiny tool
 A tool too small to say more about.

Package: nolong
Description-md5: 00000000000000000000000000000007
Description-en: A package without a long description
"""


def test_a_synopsis_asks_for_its_package_found_by_name_and_long_description(
    tmp_path: Path,
) -> None:
    counts = write_beir(tmp_path / "out", *debian_packages(TRANSLATION, 100, 100, seed=1))
    collection = load_beir(tmp_path / "out")

    documents = {d["_id"]: d for d in collection.corpus}
    assert documents["aasvg"]["title"] == "aasvg"
    assert documents["aasvg"]["text"] == (
        "A command line tool to convert ASCII art diagrams into SVG.\n\n"
        "It can be used with xml2rfc\nfor generating RFC documents."
    )
    asked = {collection.queries[q]: set(judged) for q, judged in collection.qrels.items()}
    assert asked == {"Convert ASCII art diagrams into SVG": {"aasvg"}}
    assert counts == {"documents": 4, "queries": 1, "judged_queries": 1, "judgements": 1}


def test_packages_that_cannot_be_told_apart_are_not_drawn_and_shared_synopses_ask_nothing() -> None:
    corpus, queries, _ = debian_packages(TRANSLATION, 100, 100, seed=1)

    # game and game-data say the same in their long descriptions; nolong says nothing there
    assert sorted(d["_id"] for d in corpus) == ["aasvg", "libbar-doc", "libfoo-doc", "short"]
    # the two -doc packages share a synopsis; "Tiny tool" is 2 words
    assert [q["text"] for q in queries] == ["Convert ASCII art diagrams into SVG"]


def test_a_draw_is_the_same_for_the_same_seed_and_bounded_by_the_asked_sizes() -> None:
    translation = "\n".join(
        f"Package: tool{n}\nDescription-en: Tool number {n} for you\n Does thing {n}.\n"
        for n in range(50)
    )

    first = debian_packages(translation, 20, 5, seed=3)
    again = debian_packages(translation, 20, 5, seed=3)
    other = debian_packages(translation, 20, 5, seed=4)

    assert first == again
    assert (len(first[0]), len(first[1])) == (20, 5)
    assert {judged for _, judged, _ in first[2]} <= {d["_id"] for d in first[0]}
    assert first[0] != other[0]


def test_a_stanza_ends_its_description_at_the_next_field() -> None:
    parsed = list(
        packages(
            "Package: x\nDescription-en: Does x things well\n First line.\n .\n Second."
            "\nDescription-md5: 0123\n"
        )
    )

    assert parsed == [("x", "Does x things well", "First line.\n\nSecond.")]


def test_a_japanese_translation_asks_with_synopses_of_six_characters_or_more() -> None:
    """A language written without spaces: a synopsis is one "word", so its length is counted in
    characters; the description field is read whatever its language."""
    translation = (
        "Package: 0ad\nDescription-md5: 01\nDescription-ja: 古代戦争のリアルタイム戦略ゲーム\n"
        " 0 A.D. は古代戦争のリアルタイム戦略ゲームです。\n\n"
        "Package: dc\nDescription-md5: 02\nDescription-ja: 電卓\n 任意精度の電卓です。\n"
    )
    corpus, queries, judged = debian_packages(translation, 10, 10, seed=1)

    assert {d["_id"]: d["text"] for d in corpus} == {
        "0ad": "0 A.D. は古代戦争のリアルタイム戦略ゲームです。",
        "dc": "任意精度の電卓です。",
    }
    assert [q["text"] for q in queries] == ["古代戦争のリアルタイム戦略ゲーム"]
    assert [package for _, package, _ in judged] == ["0ad"]
