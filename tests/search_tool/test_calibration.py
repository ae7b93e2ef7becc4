"""A collection measures its own HYBRID weights on pseudo-queries made from its documents, keeps
them beside itself, and its HYBRID searches fuse with them."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest

from services.search_tool.calibration import (
    ALPHA_GRID,
    Calibration,
    Measured,
    choose_alpha,
    pseudo_query,
    reciprocal_rank,
    sample_ids,
)
from services.search_tool.calibrations import DIRECTORY
from services.search_tool.config import FusionSettings, SearchToolSettings
from services.search_tool.documents import Chunk, Document
from services.search_tool.embedding import Embedder
from services.search_tool.engine.base import Fusion, FusionMethod, Strategy
from services.search_tool.fusion import Candidate
from services.search_tool.server import open_engine
from services.search_tool.service import SearchRequest, SearchService

LINEAR = Fusion(FusionMethod.LINEAR, alpha=0.7)


def _chunk(title: str, text: str, document_id: str = "d") -> Chunk:
    return Chunk(f"{document_id}__chunk_0", document_id, 0, text, title=title)


def test_a_title_the_text_does_not_repeat_is_the_pseudo_query() -> None:
    query = pseudo_query(_chunk("Statins and breast cancer", "We followed 31,236 patients."))
    assert query is not None
    assert (query.text, query.document_id) == ("Statins and breast cancer", "d")


def test_a_text_opening_with_its_title_gives_its_first_sentence_cut_to_twelve_words() -> None:
    text = (
        "wing in a slipstream . an experimental study of a wing in a propeller slipstream was "
        "made in order to determine the spanwise distribution of the lift increase"
    )
    query = pseudo_query(_chunk("wing in a slipstream .", text))
    assert query is not None
    assert query.text == "wing in a slipstream ."
    untitled = pseudo_query(_chunk("", " ".join(f"w{i}" for i in range(30))))
    assert untitled is not None
    assert untitled.text == " ".join(f"w{i}" for i in range(12))


def test_short_titles_and_short_sentences_make_no_pseudo_query() -> None:
    assert pseudo_query(_chunk("Two words", "Too short. The rest is long enough here.")) is None
    titled = pseudo_query(_chunk("Two words", "Long enough first sentence here. More."))
    assert titled is not None
    assert titled.text == "Long enough first sentence here."


def test_the_same_documents_are_drawn_every_time_and_never_more_than_asked() -> None:
    ids = [f"doc-{i}" for i in range(1000)]
    first = sample_ids(ids, 50)
    assert first == sample_ids(list(reversed(ids)), 50)
    assert len(first) == 50
    assert len(set(first)) == 50
    assert sample_ids(ids[:20], 50) == sorted(ids[:20])


def _keyword_finds_it() -> Measured:
    """d2 is the answer: the keyword side ranks it first, the dense side second."""
    return Measured(
        document_id="d2",
        dense=[[Candidate("c1", 0.9), Candidate("c2", 0.3)]],
        keyword=[Candidate("c2", 10.0), Candidate("c1", 5.0)],
        completion=None,
        documents={"c1": "d1", "c2": "d2"},
    )


def test_reciprocal_rank_is_that_of_the_source_document_under_the_fusion() -> None:
    measured = _keyword_finds_it()
    assert reciprocal_rank(measured, Fusion(FusionMethod.LINEAR, alpha=0.0)) == 1.0
    assert reciprocal_rank(measured, Fusion(FusionMethod.LINEAR, alpha=1.0)) == 0.5
    elsewhere = Measured("d9", measured.dense, measured.keyword, None, measured.documents)
    assert reciprocal_rank(elsewhere, LINEAR) == 0.0


def test_the_weight_moves_to_the_side_that_finds_the_sources() -> None:
    # d2 wins while 0.3 a + (1 - a) > 0.9 a + 0.5 (1 - a), i.e. for a < 0.4545: the best alpha
    # nearest the configured 0.7 is 0.45
    calibration = choose_alpha([_keyword_finds_it()], LINEAR, prior_queries=0, chunk_count=2)
    assert calibration.best_alpha == 0.45
    assert calibration.fusion == Fusion(FusionMethod.LINEAR, alpha=0.45)
    assert calibration.mrr[0.0] == 1.0
    assert calibration.mrr[1.0] == 0.5
    assert set(calibration.mrr) == set(ALPHA_GRID)
    assert (calibration.pseudo_queries, calibration.chunk_count) == (1, 2)


def test_few_pseudo_queries_move_the_weight_less() -> None:
    calibration = choose_alpha([_keyword_finds_it()], LINEAR, prior_queries=1)
    assert calibration.fusion.alpha == pytest.approx(0.7 + (0.45 - 0.7) * 0.5)


def test_rrf_and_no_pseudo_query_keep_the_configured_fusion() -> None:
    rrf = Fusion(FusionMethod.RRF, rrf_k=60)
    assert choose_alpha([_keyword_finds_it()], rrf, prior_queries=0).fusion == rrf
    assert choose_alpha([], LINEAR, prior_queries=0).fusion == LINEAR


def test_a_calibration_survives_its_json_and_a_bad_one_is_refused() -> None:
    calibration = choose_alpha([_keyword_finds_it()], LINEAR, prior_queries=0, chunk_count=7)
    assert Calibration.from_json(json.loads(json.dumps(calibration.as_json()))) == calibration
    bad = {**calibration.as_json(), "alpha": 1.5}
    with pytest.raises(ValueError, match="outside"):
        Calibration.from_json(bad)
    with pytest.raises(KeyError):
        Calibration.from_json({"method": "linear"})


# --- through the search service, on the embedded engine and the real model ---------------------

TOPICS = [
    "volcano eruptions and lava flows",
    "tax law for small businesses",
    "training plans for marathon runners",
    "the history of the printing press",
    "growing tomatoes in cold climates",
    "neural networks for image recognition",
    "medieval castle architecture",
    "saltwater aquarium maintenance",
    "jazz piano improvisation",
    "coral reef bleaching",
    "electric car battery chemistry",
    "ancient roman road building",
]


def _documents(count: int) -> list[Document]:
    return [
        Document(
            id=f"doc-{i:03d}",
            title=f"Notes on {TOPICS[i % len(TOPICS)]} volume {i}",
            text=f"This is entry {i}. It discusses {TOPICS[i % len(TOPICS)]} in some detail, "
            f"with examples numbered {i * 7} and {i * 13}.",
        )
        for i in range(count)
    ]


async def _service(settings: SearchToolSettings, embedder: Embedder) -> SearchService:
    """A search service with calibration on (it is off by default)."""
    on = settings.fusion.model_copy(update={"calibrate": True})
    settings = settings.model_copy(update={"fusion": on})
    return SearchService(await open_engine(settings), embedder, settings)


@pytest.fixture
async def service(settings: SearchToolSettings, embedder: Embedder) -> AsyncIterator[SearchService]:
    opened = await _service(settings, embedder)
    await opened.upsert_documents("c", _documents(60))
    yield opened
    await opened.close()


def _hybrid(text: str = "lava from volcano eruptions") -> SearchRequest:
    return SearchRequest(collection="c", primary=text, strategy=Strategy.HYBRID, limit=10)


async def test_a_collection_calibrates_on_its_own_documents(service: SearchService) -> None:
    assert service.calibrations is not None
    calibration = await service.calibrations.calibrate("c")
    assert calibration.pseudo_queries == 60
    assert calibration.fusion.method is FusionMethod.LINEAR
    assert 0.0 <= calibration.fusion.alpha <= 1.0
    assert set(calibration.mrr) == set(ALPHA_GRID)
    # titles name their documents: some blend finds most sources first
    assert max(calibration.mrr.values()) > 0.5
    assert calibration.chunk_count == (await service.get_collection("c")).chunk_count


async def test_the_first_hybrid_search_calibrates_in_the_background_and_stores_it(
    service: SearchService, settings: SearchToolSettings
) -> None:
    assert service.calibrations is not None
    assert service.calibrations.get("c") is None
    await service.search(_hybrid())
    await service.calibrations.settled()
    calibration = service.calibrations.get("c")
    assert calibration is not None
    stored = json.loads((settings.data_dir / DIRECTORY / "c.json").read_text())
    assert Calibration.from_json(stored["calibration"]) == calibration


async def _force_dense_only(settings: SearchToolSettings) -> None:
    """Rewrite the stored calibration's alpha to 1.0: HYBRID then fuses the dense side only."""
    path = settings.data_dir / DIRECTORY / "c.json"
    stored = json.loads(path.read_text())
    stored["calibration"]["alpha"] = 1.0
    path.write_text(json.dumps(stored))


async def test_a_restarted_service_fuses_hybrid_with_the_stored_calibration(
    service: SearchService, settings: SearchToolSettings, embedder: Embedder
) -> None:
    assert service.calibrations is not None
    await service.calibrations.calibrate("c")
    await _force_dense_only(settings)
    restarted = await _service(settings, embedder)
    try:
        hits = (await restarted.search(_hybrid())).page.hits
        assert hits
        # alpha 1: each hit's fused score is its cosine, whatever its BM25
        assert all(h.score == pytest.approx(h.dense_score) for h in hits)
        assert any(h.keyword_score for h in hits)
    finally:
        await restarted.close()


async def test_a_calibration_made_for_another_fusion_setting_is_ignored(
    service: SearchService, settings: SearchToolSettings, embedder: Embedder
) -> None:
    assert service.calibrations is not None
    await service.calibrations.calibrate("c")
    await _force_dense_only(settings)
    other = settings.model_copy(update={"fusion": FusionSettings(alpha=0.5, calibrate=True)})
    restarted = await _service(other, embedder)
    try:
        assert restarted.calibrations is not None
        assert restarted.calibrations.get("c") is None
        hits = (await restarted.search(_hybrid())).page.hits
        assert any(h.score != pytest.approx(h.dense_score) for h in hits)
    finally:
        await restarted.close()


async def test_an_unreadable_calibration_file_is_ignored_and_measured_again(
    service: SearchService, settings: SearchToolSettings, embedder: Embedder
) -> None:
    path = settings.data_dir / DIRECTORY / "c.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("{not json")
    restarted = await _service(settings, embedder)
    try:
        assert restarted.calibrations is not None
        assert restarted.calibrations.get("c") is None
        assert (await restarted.search(_hybrid())).page.hits
        await restarted.calibrations.settled()
        assert restarted.calibrations.get("c") is not None
        assert Calibration.from_json(json.loads(path.read_text())["calibration"])
    finally:
        await restarted.close()


async def test_dropping_a_collection_drops_its_calibration(
    service: SearchService, settings: SearchToolSettings
) -> None:
    assert service.calibrations is not None
    await service.calibrations.calibrate("c")
    path = settings.data_dir / DIRECTORY / "c.json"
    assert path.exists()
    await service.delete_collection("c")
    assert not path.exists()
    assert service.calibrations.get("c") is None


async def test_a_small_collection_keeps_the_configured_fusion(
    settings: SearchToolSettings, embedder: Embedder
) -> None:
    small = await _service(settings, embedder)
    try:
        await small.upsert_documents("s", _documents(10))
        assert small.calibrations is not None
        calibration = await small.calibrations.calibrate("s")
        assert calibration.pseudo_queries == 0
        assert calibration.fusion == settings.fusion.to_fusion()
    finally:
        await small.close()


def test_calibration_is_off_unless_configured() -> None:
    assert FusionSettings().calibrate is False


async def test_with_calibration_off_hybrid_fuses_with_the_configured_alpha(
    settings: SearchToolSettings, embedder: Embedder
) -> None:
    off = settings.model_copy(update={"fusion": FusionSettings(calibrate=False)})
    service = SearchService(await open_engine(off), embedder, off)
    try:
        await service.upsert_documents("c", _documents(60))
        assert service.calibrations is None
        assert (await service.search(_hybrid())).page.hits
        assert not (off.data_dir / DIRECTORY).exists()
    finally:
        await service.close()


async def test_a_calibration_of_a_missing_collection_fails_without_breaking_searches(
    service: SearchService,
) -> None:
    assert service.calibrations is not None
    assert service.calibrations.fusion_for("gone") == FusionSettings(calibrate=True).to_fusion()
    await service.calibrations.settled()  # the background check failed quietly
    assert service.calibrations.get("gone") is None
    assert (await service.search(_hybrid())).page.hits
