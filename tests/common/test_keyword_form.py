"""Chinese, Japanese and Korean runs become character pairs and Cyrillic words their stems for
keyword scoring; every other text is left exactly as it was, so nothing an index already holds for
it changes."""

from __future__ import annotations

import pytest

from services.common.keyword_form import (
    FORM,
    LANGUAGES,
    form_of,
    keyword_form,
    rewrites,
    stemmer,
)
from services.search_tool.engine.bm25 import tokens


@pytest.mark.parametrize(
    ("text", "paired"),
    [
        ("東京都の", "東京 京都 都の"),
        ("北京是中国的首都", "北京 京是 是中 中国 国的 的首 首都"),
        ("서울은 한국의 수도", "서울 울은 한국 국의 수도"),
        ("リアルタイム戦略ゲーム", "リア アル ルタ タイ イム ム戦 戦略 略ゲ ゲー ーム"),
        ("北", "北"),
    ],
)
def test_each_run_becomes_its_overlapping_character_pairs(text: str, paired: str) -> None:
    assert keyword_form(text) == paired


def test_letters_and_digits_next_to_a_run_are_split_from_it() -> None:
    assert keyword_form("Python3の使い方") == "Python3 の使 使い い方"
    assert keyword_form("500年至公元500年") == "500 年至 至公 公元 500 年"
    assert tokens(keyword_form("Python3の使い方")) == ["python3", "の使", "使い", "い方"]


@pytest.mark.parametrize(
    "text",
    ["How do I read a CSV file?", "Straßenbahn in München", "Αθήνα", "", "é"],
)
def test_text_without_cjk_characters_is_returned_unchanged(text: str) -> None:
    assert keyword_form(text) == text
    assert not rewrites(text)


def test_pairing_twice_finds_the_same_terms() -> None:
    text = "0 A.D. は自由でオープンソースの、古代戦争のリアルタイム戦略ゲームです。"
    assert tokens(keyword_form(keyword_form(text))) == tokens(keyword_form(text))


def test_a_long_sentence_the_tokenizer_would_drop_whole_becomes_searchable_terms() -> None:
    sentence = "東京は日本の首都であり世界最大の都市圏の一つです"  # 24 characters, 72 bytes
    assert tokens(sentence) == []
    assert "都市" in tokens(keyword_form(sentence))
    assert rewrites(sentence)


def test_cyrillic_words_become_their_stems_so_inflected_forms_meet() -> None:
    assert keyword_form("Москва — столица России") == "москв — столиц росс"
    assert tokens(keyword_form("столицы")) == tokens(keyword_form("Столица"))
    assert tokens(keyword_form("бібліотеки")) == tokens(keyword_form("бібліотека"))
    assert keyword_form("Qt5-библиотека") == "Qt5-библиотек"
    assert rewrites("игра")


def test_a_collection_in_german_meets_the_inflected_forms_of_its_words() -> None:
    assert keyword_form("Die Häuser der Städte", "german") == "die haus der stadt"
    assert tokens(keyword_form("Haus", "german")) == tokens(keyword_form("Häusern", "german"))
    # the English stemmer the index applies alone keeps them apart
    assert tokens(keyword_form("Haus")) != tokens(keyword_form("Häusern"))


@pytest.mark.parametrize(
    ("language", "one", "other"),
    [
        ("french", "bibliothèque", "bibliothèques"),
        ("spanish", "canciones", "canción"),
        ("german", "Verbindungen", "Verbindung"),
    ],
)
def test_each_language_meets_its_own_inflections(language: str, one: str, other: str) -> None:
    assert tokens(keyword_form(one, language)) == tokens(keyword_form(other, language))


def test_another_language_still_pairs_cjk_and_stems_cyrillic_and_keeps_digits() -> None:
    assert keyword_form("Qt5-Bibliotheken 東京都の Москва", "german") == (
        "qt5-bibliothek 東京 京都 都の москв"
    )


def test_english_text_is_left_to_the_index_and_names_no_form() -> None:
    text = "Straßenbahn in München"
    assert keyword_form(text, "english") == text
    assert form_of(text) is None
    assert form_of("東京") == FORM


def test_the_form_of_text_in_another_language_names_the_language() -> None:
    assert form_of("Haus", "german") != form_of("Haus", "french")
    assert form_of("Haus", "german") != FORM
    assert form_of("2024 — 17", "german") is None  # no letter: nothing to stem
    assert rewrites("Haus", "german")


def test_a_language_without_a_stemmer_is_refused() -> None:
    assert "german" in LANGUAGES
    assert "english" in LANGUAGES
    with pytest.raises(KeyError, match="klingon"):
        keyword_form("Haus", "klingon")


def test_each_thread_stems_with_its_own_stemmer_as_pystemmer_requires() -> None:
    from concurrent.futures import ThreadPoolExecutor

    here = stemmer("german")
    assert stemmer("german") is here
    with ThreadPoolExecutor(max_workers=1) as pool:
        there = pool.submit(stemmer, "german").result()
    assert there is not here
    assert there.stemWord("häuser") == here.stemWord("häuser") == "haus"


def test_a_serbian_collection_stems_cyrillic_as_serbian_so_both_alphabets_meet() -> None:
    cyrillic, latin = keyword_form("Библиотеке", "serbian"), keyword_form("biblioteka", "serbian")
    assert tokens(cyrillic) == tokens(latin) == ["bibliotek"]
    # any other language keeps the Russian stem for Cyrillic (as English does)
    assert keyword_form("Библиотеке", "german") == keyword_form("Библиотеке") == "библиотек"
