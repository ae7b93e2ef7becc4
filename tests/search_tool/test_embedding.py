"""The embedders: real MiniLM ONNX inference, and the OpenAI embedder against a local fake API."""

from __future__ import annotations

import asyncio
import hashlib
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
import uvicorn
from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from services.search_tool.embedding import (
    EmbeddingRejected,
    EmbeddingSettings,
    EmbeddingUnavailable,
    build_embedder,
)
from services.search_tool.embedding.minilm import MiniLmEmbedder
from services.search_tool.embedding.openai import OpenAiEmbedder

GOOD_KEY = "sk-test-good-key-0123456789"


@pytest.fixture(scope="module")
def minilm() -> MiniLmEmbedder:
    return MiniLmEmbedder(batch_size=4)


def _cosine(a: np.ndarray[Any, Any], b: np.ndarray[Any, Any]) -> float:
    return float(np.dot(a, b))


async def test_minilm_places_paraphrases_closer_than_unrelated_sentences(
    minilm: MiniLmEmbedder,
) -> None:
    vectors = await minilm.embed(
        [
            "How do I create a temporary directory?",
            "Make a temp folder that is deleted automatically.",
            "The orchestra played Beethoven's ninth symphony.",
        ]
    )
    assert _cosine(vectors[0], vectors[1]) > 0.5
    assert _cosine(vectors[0], vectors[1]) > _cosine(vectors[0], vectors[2]) + 0.3


async def test_minilm_returns_unit_length_384_d_float32_rows(minilm: MiniLmEmbedder) -> None:
    vectors = await minilm.embed(["alpha", "beta gamma", ""])
    assert vectors.shape == (3, 384) == (3, minilm.dimensions)
    assert vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert minilm.model_name == "sentence-transformers/all-MiniLM-L6-v2"


async def test_minilm_batched_padded_results_equal_one_at_a_time(minilm: MiniLmEmbedder) -> None:
    texts = [
        "short",
        "a somewhat longer sentence about sorting lists in place",
        "x " * 120,
        "json.dumps serialises an object to a JSON formatted string",
        "tiny",
        "regular expressions match patterns in text",
    ]
    together = await minilm.embed(texts)
    alone = np.stack([(await minilm.embed([t]))[0] for t in texts])
    np.testing.assert_allclose(together, alone, atol=2e-4)


async def test_minilm_large_request_on_the_batch_path_equals_small_requests(
    minilm: MiniLmEmbedder,
) -> None:
    texts = [f"sentence number {i} about {topic}" for i in range(6) for topic in ("tea", "rust")]
    assert len(texts) > 4  # above the fixture's batch_size: the batch path, one core per call
    together = await minilm.embed(texts)
    in_pairs = np.concatenate([await minilm.embed(texts[i : i + 2]) for i in range(0, 12, 2)])
    np.testing.assert_allclose(together, in_pairs, atol=2e-4)


async def test_minilm_truncates_text_longer_than_the_model_window(minilm: MiniLmEmbedder) -> None:
    long_text = "the quick brown fox jumps over the lazy dog " * 400
    prefix = "the quick brown fox jumps over the lazy dog " * 60
    vectors = await minilm.embed([long_text, prefix])
    assert vectors.shape == (2, 384)
    assert _cosine(vectors[0], vectors[1]) > 0.99


async def test_minilm_embeds_an_empty_list_as_an_empty_matrix(minilm: MiniLmEmbedder) -> None:
    vectors = await minilm.embed([])
    assert vectors.shape == (0, 384)


async def test_minilm_serves_concurrent_callers_without_mixing_rows(
    minilm: MiniLmEmbedder,
) -> None:
    texts = ["first topic about databases", "second topic about gardening", "third: music"]
    expected = await minilm.embed(texts)
    results = await asyncio.gather(*(minilm.embed([t]) for t in texts * 3))
    for i, row in enumerate(results):
        np.testing.assert_allclose(row[0], expected[i % 3], atol=2e-4)


def test_build_embedder_defaults_to_minilm() -> None:
    embedder = build_embedder(EmbeddingSettings(batch_size=8))
    assert isinstance(embedder, MiniLmEmbedder)
    assert embedder.dimensions == 384


def test_the_scripts_an_embedder_reads_are_the_models_own_unless_configured() -> None:
    assert build_embedder(EmbeddingSettings()).scripts == frozenset({"Latin"})
    configured = EmbeddingSettings(scripts=["Latin", "Cyrillic"])
    assert build_embedder(configured).scripts == frozenset({"Latin", "Cyrillic"})
    assert build_embedder(EmbeddingSettings(scripts=["any"])).scripts is None


@pytest.mark.parametrize("scripts", [["Klingon"], [], ["Latin", "no such script"]])
def test_a_script_name_unicode_does_not_know_is_refused_at_start_up(scripts: list[str]) -> None:
    with pytest.raises(ValidationError, match="scripts"):
        EmbeddingSettings(scripts=scripts)


def test_build_embedder_for_openai_without_a_key_names_the_variable() -> None:
    with pytest.raises(EmbeddingRejected, match="OPENAI_API_KEY"):
        build_embedder(EmbeddingSettings(kind="openai"))


# --- OpenAI embedder against a local fake of POST /v1/embeddings ---------------------------------


@dataclass
class FakeEmbeddingsApi:
    """A local `/v1/embeddings` speaking OpenAI's wire format, with injectable failures."""

    width: int = 8
    requests: list[dict[str, Any]] = field(default_factory=list)
    fail_with: int | None = None
    retry_after: str | None = None

    async def handle(self, request: Request) -> JSONResponse:
        body = await request.json()
        self.requests.append(body)
        if request.headers.get("authorization") != f"Bearer {GOOD_KEY}":
            return _error(401, "Incorrect API key provided: sk-wr***key", "invalid_api_key")
        if self.fail_with is not None:
            headers = {"retry-after": self.retry_after} if self.retry_after else None
            return _error(self.fail_with, "try again later", "server_error", headers)
        width = body.get("dimensions") or self.width
        data = [
            {"object": "embedding", "index": i, "embedding": _fake_vector(text, width)}
            for i, text in reversed(list(enumerate(body["input"])))
        ]
        return JSONResponse(
            {
                "object": "list",
                "data": data,
                "model": body["model"],
                "usage": {"prompt_tokens": 3, "total_tokens": 3},
            }
        )


def _error(
    status: int, message: str, code: str, headers: dict[str, str] | None = None
) -> JSONResponse:
    payload = {"error": {"message": message, "type": "invalid_request_error", "code": code}}
    return JSONResponse(payload, status_code=status, headers=headers)


def _fake_vector(text: str, width: int) -> list[float]:
    digest = hashlib.sha256(text.encode()).digest()
    return [float(digest[i % len(digest)]) + 1.0 for i in range(width)]


@pytest.fixture
async def fake_api() -> AsyncIterator[tuple[FakeEmbeddingsApi, str]]:
    api = FakeEmbeddingsApi()
    app = Starlette(routes=[Route("/v1/embeddings", api.handle, methods=["POST"])])
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        yield api, f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    finally:
        server.should_exit = True
        await task
        sock.close()


def _openai(base_url: str, *, key: str = GOOD_KEY, **kwargs: Any) -> OpenAiEmbedder:
    return OpenAiEmbedder(api_key=key, base_url=base_url, model="text-embedding-3-small", **kwargs)


async def test_openai_embedder_batches_and_keeps_input_order(
    fake_api: tuple[FakeEmbeddingsApi, str],
) -> None:
    api, url = fake_api
    embedder = _openai(url, batch_size=2, dimensions=8)
    texts = ["one", "two", "three", "four", "five"]
    vectors = await embedder.embed(texts)
    assert [len(r["input"]) for r in api.requests] == [2, 2, 1]
    assert all(r["dimensions"] == 8 for r in api.requests)
    expected = np.asarray([_fake_vector(t, 8) for t in texts], dtype=np.float32)
    expected /= np.linalg.norm(expected, axis=1, keepdims=True)
    np.testing.assert_allclose(vectors, expected, rtol=1e-6)
    assert embedder.dimensions == 8
    await embedder.close()


async def test_openai_embedder_learns_dimensions_of_an_unknown_model_from_first_answer(
    fake_api: tuple[FakeEmbeddingsApi, str],
) -> None:
    _, url = fake_api
    embedder = OpenAiEmbedder(api_key=GOOD_KEY, base_url=url, model="local-embedder")
    with pytest.raises(EmbeddingRejected, match="openai_dimensions"):
        _ = embedder.dimensions
    vectors = await embedder.embed(["hello"])
    assert vectors.shape == (1, 8)
    assert embedder.dimensions == 8
    await embedder.close()


async def test_openai_embedder_reports_bad_credentials_without_echoing_the_key(
    fake_api: tuple[FakeEmbeddingsApi, str],
) -> None:
    api, url = fake_api
    wrong_key = "sk-wrong-secret-key-987654"
    embedder = _openai(url, key=wrong_key)
    with pytest.raises(EmbeddingRejected) as caught:
        await embedder.embed(["hello"])
    assert caught.value.reason == "EMBEDDING_AUTH_FAILED"
    assert "401" in caught.value.message
    assert wrong_key not in str(caught.value)
    assert "sk-wr" not in str(caught.value)
    assert len(api.requests) == 1
    await embedder.close()


async def test_openai_embedder_maps_rate_limit_to_retryable_error_with_delay_and_no_retries(
    fake_api: tuple[FakeEmbeddingsApi, str],
) -> None:
    api, url = fake_api
    api.fail_with, api.retry_after = 429, "7"
    embedder = _openai(url)
    with pytest.raises(EmbeddingUnavailable) as caught:
        await embedder.embed(["hello"])
    assert caught.value.retry_after_s == 7.0
    assert len(api.requests) == 1
    await embedder.close()


async def test_openai_embedder_maps_server_error_to_unavailable(
    fake_api: tuple[FakeEmbeddingsApi, str],
) -> None:
    api, url = fake_api
    api.fail_with = 503
    embedder = _openai(url)
    with pytest.raises(EmbeddingUnavailable, match="503"):
        await embedder.embed(["hello"])
    await embedder.close()


async def test_openai_embedder_maps_refused_connection_to_unavailable() -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    embedder = _openai(f"http://127.0.0.1:{port}/v1")
    with pytest.raises(EmbeddingUnavailable, match="unreachable"):
        await embedder.embed(["hello"])
    await embedder.close()


async def test_build_embedder_for_openai_reads_the_key_from_the_environment(
    fake_api: tuple[FakeEmbeddingsApi, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    api, url = fake_api
    monkeypatch.setenv("OPENAI_API_KEY", GOOD_KEY)
    embedder = build_embedder(
        EmbeddingSettings(kind="openai", openai_base_url=url, openai_dimensions=4)
    )
    assert isinstance(embedder, OpenAiEmbedder)
    vectors = await embedder.embed(["a", "b"])
    assert vectors.shape == (2, 4)
    assert embedder.model_name == "text-embedding-3-small"
    assert embedder.scripts is None  # trained on every script
    assert len(api.requests) == 1
    await embedder.close()
