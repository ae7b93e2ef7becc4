"""Chinese, Japanese and Korean runs become character pairs and Cyrillic words their stems for
keyword scoring; every other text is left exactly as it was, so nothing an index already holds for
it changes."""

from __future__ import annotations

import pytest

from services.common.keyword_form import keyword_form, rewrites
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
