"""What the first search finds for a question asked in other words than the documents use: the
paraphrased questions of `bench/answer_quality_questions.py` over the demo collection, each
with the documents that answer it (`--questions`: the 48 of the first set, the 150 held out, or
all).

    python bench/first_search.py [--data-dir var/bench-answer-quality] [--build]
                                 [--questions tuned|held-out|all]
                                 [--variant NAME [--beir DIR:WORK_DIR ...] [--scratch DIR]]

For KEYWORD, SEMANTIC and HYBRID (the configured fusion) the page of 10 hits a search returns is
replayed exactly as the engine ranks it (`engine.scored_candidates` + `fusion.fuse`, as
`bench/eval_beir.py` does), and the rank of the first hit whose document answers the question
gives: answering document at rank 1, within the top 3, within the top 10, and MRR@10.

`--variant NAME` measures one change (`VARIANTS`) paired against the unchanged engine on the
same questions: the difference of each figure with its 95 % paired bootstrap interval (questions
resampled) and how many questions moved each way. A query variant rewrites the question
deterministically or embeds it with another query model (`integer-query-model*`: the
documents keep their stored vectors); a document variant rebuilds a copy of the collection under
`--scratch` with the chunks' embedded text (re-embedded) or keyword text (BM25 rebuilt) changed.
`--beir DIR:WORK_DIR` also measures the variant on a BEIR-format collection already built by
`bench/eval_beir.py` in WORK_DIR (nDCG@10 of each strategy, paired; WORK_DIR is only read): the
held-out check a variant must pass before it is adopted, since 48 questions are too few to adopt
anything on alone.

The demo collection is read from `--data-dir` (`bench/answer_quality.py` builds it there);
`--build` brings it up to date first through an in-process search tool (only what changed is
embedded). Either way it is settled first (`settled`: every row in its indexes, as a running
search tool serves it). Query vectors are cached in `<data-dir>/first-search-vectors.npz`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import re
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import lancedb
import numpy as np
import numpy.typing as npt
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.answer_quality_questions import add_question_set_argument, question_set
from bench.embedding_cache import CachedEmbedder
from bench.eval_scifact import Replay, per_query_ndcg, replayed
from bench.harness import (
    RESULTS_DIR,
    VAR_DIR,
    SciFact,
    emit,
    load_beir,
    machine,
    note,
    settings_for,
)
from bench.integer_minilm import IntegerQueryEmbedder, OneTextPerCall, calibration_queries
from bench.scifact_collection import cached_embedder
from services.search_tool.embedding import Embedder
from services.search_tool.embedding.minilm import MiniLmEmbedder
from services.search_tool.engine.base import EngineQuery, Fusion, FusionMethod, Strategy
from services.search_tool.engine.lancedb import LanceDBEngine
from services.search_tool.engine.lancedb.indexes import ensure_indexes
from services.search_tool.engine.lancedb.rows import SEARCH_TEXT_COLUMN, VECTOR_COLUMN
from services.search_tool.fusion import Candidate, fuse

COLLECTION = "python-docs"
PAGE = 10
CANDIDATES = 200
"""Chunks a BEIR query's replay ranks (as `bench/eval_beir.py`: documents for nDCG@10)."""
BOOTSTRAP_SAMPLES = 2_000
RESULTS = RESULTS_DIR / "first_search.json"

_FRAMING = re.compile(
    r"^\s*(?:(?:how|what|which|where|when|why)\b(?:\s+(?:do|does|can|could|should|would|is|are)"
    r"\s+(?:i|you|we|one)\b|\s+to\b)?|is\s+there\s+(?:a|an|any)\s+(?:way|function|method)\s+to"
    r"|(?:can|could|should|do)\s+(?:i|you|we)\b)\s*",
    re.IGNORECASE,
)


def question_framing_removed(text: str) -> str:
    """The question without its interrogative opening ("How do I", "What", "Is there a way to")
    and final question mark: what the user wants, in the words left. Unchanged when nothing is
    left."""
    stripped = _FRAMING.sub("", text, count=1).rstrip().rstrip("?").strip()
    return stripped or text


_VOCABULARY: frozenset[str] | None = None


def _vocabulary() -> frozenset[str]:
    """MiniLM's whole-word pieces (its tokenizer ships with the search tool)."""
    global _VOCABULARY
    if _VOCABULARY is None:
        source = resources.files("services.search_tool").joinpath("resources/minilm/tokenizer.json")
        vocab = json.loads(source.read_text(encoding="utf-8"))["model"]["vocab"]
        _VOCABULARY = frozenset(w for w in vocab if w.isalpha() and w.isascii())
    return _VOCABULARY


def _segmented(word: str) -> list[str]:
    """A run of lower-case letters as dictionary words (`deepcopy` → deep copy, `nlargest` →
    n largest): the fewest pieces, short ones (1-3 letters; one letter only first) counting
    half more, at most 3 pieces and one short; itself when it is a word, short, or does not
    split so."""
    vocabulary = _vocabulary()
    if len(word) < 6 or word in vocabulary:
        return [word]
    best: list[tuple[float, list[str]] | None] = [(0.0, [])] + [None] * len(word)
    for end in range(1, len(word) + 1):
        for start in range(max(0, end - 20), end):
            head, piece = best[start], word[start:end]
            if head is None or piece not in vocabulary or (len(piece) == 1 and start > 0):
                continue
            cost = head[0] + (1.5 if len(piece) <= 3 else 1.0)
            current = best[end]
            if current is None or cost < current[0]:
                best[end] = (cost, [*head[1], piece])
    found = best[-1]
    if found is None:
        return [word]
    pieces = found[1]
    short = sum(len(p) <= 3 for p in pieces)
    return pieces if len(pieces) <= 3 and short <= 1 else [word]


def identifier_words(title: str) -> str:
    """The words an identifier title is made of (`tempfile.TemporaryDirectory` → tempfile
    temporary directory; `shutil.rmtree` → shutil rm tree); "" when they add nothing to the
    title's own words."""
    words: list[str] = []
    for part in re.split(r"[^A-Za-z0-9]+", title):
        for piece in re.findall(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+", part):
            words.extend(_segmented(piece.lower()))
    own = {w.lower() for w in re.split(r"[^A-Za-z0-9]+", title) if w}
    return " ".join(words) if set(words) - own else ""


def with_title_words(title: str, body: str) -> str:
    """`title (its words)` then the body, as the dense side would read it."""
    words = identifier_words(title)
    head = f"{title} ({words})" if words else title
    return f"{head}\n{body}" if title else body


@dataclass(frozen=True)
class Variant:
    """One change measured against the unchanged engine: the query rewritten, or the chunks'
    embedded text (re-embedded into a copy of the collection), or their keyword text."""

    query: Callable[[str], str] | None = None
    embedded: Callable[[str, str], str] | None = None
    """(title, chunk text) → what the dense side embeds; today `title\ntext`."""
    keyword: Callable[[str, str], str] | None = None
    """(title, stored keyword text without the title) → what BM25 indexes; today `title\n...`."""
    feedback: tuple[int, float] | None = None
    """(k, weight): the query vector moved toward its first k dense hits (Rocchio: q + weight ·
    their mean, normalised) and searched again; the keyword text unchanged."""
    query_embedder: Callable[[], Embedder] | None = None
    """Builds the embedder the query vectors come from instead (one query per call, as a search
    embeds); the documents keep their stored vectors. Its vectors are cached apart."""


VARIANTS: dict[str, Variant] = {
    "question-framing": Variant(query=question_framing_removed),
    "title-words-dense": Variant(embedded=with_title_words),
    "title-words-keyword": Variant(keyword=with_title_words),
    "title-twice-keyword": Variant(keyword=lambda title, body: f"{title}\n{title}\n{body}"),
    "no-title-dense": Variant(embedded=lambda title, text: text),
    "dense-feedback": Variant(feedback=(3, 0.5)),
    # the control of the integer-query-model variants: today's graph, one query per call
    "shipped-query-model": Variant(query_embedder=lambda: OneTextPerCall(MiniLmEmbedder())),
    "integer-query-model": Variant(query_embedder=lambda: OneTextPerCall(IntegerQueryEmbedder())),
    "integer-query-model-smoothed": Variant(
        query_embedder=lambda: OneTextPerCall(
            IntegerQueryEmbedder(calibration=calibration_queries())
        )
    ),
    "integer-query-model-s8": Variant(
        query_embedder=lambda: OneTextPerCall(IntegerQueryEmbedder(unsigned=False))
    ),
}


def strategies(configured: Fusion) -> dict[str, Fusion]:
    return {
        "KEYWORD": Fusion(FusionMethod.LINEAR, alpha=0.0),
        "SEMANTIC": Fusion(FusionMethod.LINEAR, alpha=1.0),
        "HYBRID": configured,
    }


async def replays_of(
    engine: LanceDBEngine,
    embedder: CachedEmbedder,
    collection: str,
    texts: dict[str, str],
    limit: int = PAGE,
    *,
    feedback: tuple[int, float] | None = None,
    table: Any = None,
) -> dict[str, Replay]:
    """Each query's scored candidates (both sides) for a page of `limit`, to fuse as any
    strategy; with `feedback`, those of the query vector moved toward its first dense hits
    (their vectors read from `table`)."""
    ids = sorted(texts)
    vectors = await embedder.embed([texts[q] for q in ids])
    embedder.save()
    out: dict[str, Replay] = {}
    for query_id, vector in zip(ids, vectors, strict=True):
        query = EngineQuery(Strategy.HYBRID, texts[query_id], np.stack([vector]), limit=limit)
        scored, chunks = await engine.scored_candidates(collection, query)
        if feedback is not None:
            moved = await moved_toward(table, vector, scored.dense[0][: feedback[0]], feedback[1])
            query = EngineQuery(Strategy.HYBRID, texts[query_id], np.stack([moved]), limit=limit)
            scored, chunks = await engine.scored_candidates(collection, query)
        out[query_id] = Replay(scored, {a: c.document_id for a, c in chunks.items()})
    return out


async def moved_toward(
    table: Any, vector: npt.NDArray[np.float32], hits: list[Candidate], weight: float
) -> npt.NDArray[np.float32]:
    """Rocchio: `vector + weight · mean(the hits' stored vectors)`, L2-normalised."""
    if not hits:
        return vector
    taken = await table.take_row_ids([int(h.id) for h in hits]).select([VECTOR_COLUMN]).to_arrow()
    stored = taken.column(VECTOR_COLUMN).combine_chunks().values.to_numpy()
    moved = vector + weight * stored.reshape(taken.num_rows, -1).mean(axis=0)
    normalised: npt.NDArray[np.float32] = (moved / np.linalg.norm(moved)).astype(np.float32)
    return normalised


def first_answer_rank(replay: Replay, fusion: Fusion, answering: set[str]) -> int | None:
    """1-based rank of the first hit of the page whose document answers, or None."""
    s = replay.scored
    page = fuse(s.dense, s.keyword, fusion, s.completion)[:PAGE]
    for rank, hit in enumerate(page, start=1):
        if replay.documents.get(hit.id) in answering:
            return rank
    return None


def per_question(ranks: dict[str, int | None]) -> dict[str, dict[str, float]]:
    """Per question: at 1, top 3, top 10 (1/0) and reciprocal rank (0 beyond the page)."""
    return {
        q: {
            "at_1": float(r == 1),
            "top_3": float(r is not None and r <= 3),
            "top_10": float(r is not None),
            "mrr@10": 1.0 / r if r else 0.0,
        }
        for q, r in ranks.items()
    }


def summary(rows: dict[str, dict[str, float]]) -> dict[str, float]:
    n = len(rows)
    return {m: round(sum(r[m] for r in rows.values()) / n, 3) for m in next(iter(rows.values()))}


def paired(a: dict[str, float], b: dict[str, float], *, seed: int = 7) -> dict[str, Any]:
    """Mean of a - b over the queries and its 95 % bootstrap interval (queries resampled)."""
    ids = sorted(a)
    deltas = [a[q] - b[q] for q in ids]
    rng = random.Random(seed)
    means = sorted(
        sum(deltas[rng.randrange(len(ids))] for _ in ids) / len(ids)
        for _ in range(BOOTSTRAP_SAMPLES)
    )
    return {
        "mean": round(sum(deltas) / len(ids), 4),
        "ci95": [
            round(means[int(0.025 * BOOTSTRAP_SAMPLES)], 4),
            round(means[int(0.975 * BOOTSTRAP_SAMPLES) - 1], 4),
        ],
        "better": sum(d > 0 for d in deltas),
        "worse": sum(d < 0 for d in deltas),
    }


async def variant_collection(
    source: Path, target: Path, collection: str, variant: Variant, embedder: CachedEmbedder
) -> int:
    """A copy of `source`'s collection under `target` whose chunks hold `variant`'s embedded or
    keyword text (indexes rebuilt); returns how many chunks changed."""
    if variant.embedded is None and variant.keyword is None:
        raise ValueError("the variant changes no chunk")
    await asyncio.to_thread(shutil.rmtree, target, True)
    await asyncio.to_thread(shutil.copytree, source, target)
    database = await lancedb.connect_async(str(target))
    table = await (await database.open_table(collection)).query().to_arrow()
    titles = table.column("title").to_pylist()
    changed = 0
    if variant.embedded is not None:
        texts = table.column("text").to_pylist()
        before = [embedding_text_today(t, x) for t, x in zip(titles, texts, strict=True)]
        after = [variant.embedded(t, x) for t, x in zip(titles, texts, strict=True)]
        changed = sum(a != b for a, b in zip(after, before, strict=True))
        vectors = await embedder.embed(after)
        embedder.save()
        field = table.schema.field(VECTOR_COLUMN)
        column = pa.FixedSizeListArray.from_arrays(
            pa.array(np.asarray(vectors, dtype=np.float32).ravel()), vectors.shape[1]
        ).cast(field.type)
        table = table.set_column(table.schema.get_field_index(VECTOR_COLUMN), field, column)
    if variant.keyword is not None:
        stored = table.column(SEARCH_TEXT_COLUMN).to_pylist()
        after = [
            variant.keyword(t, k[len(t) + 1 :] if t and k.startswith(t + "\n") else k)
            for t, k in zip(titles, stored, strict=True)
        ]
        changed = sum(a != b for a, b in zip(after, stored, strict=True))
        field = table.schema.field(SEARCH_TEXT_COLUMN)
        index = table.schema.get_field_index(SEARCH_TEXT_COLUMN)
        table = table.set_column(index, field, pa.array(after, type=field.type))
    await database.create_table(collection, data=table, mode="overwrite")
    await ensure_indexes(await database.open_table(collection))
    return changed


def embedding_text_today(title: str, text: str) -> str:
    """What the dense side embeds for a chunk (`ingest.embedding_text`)."""
    return f"{title}\n{text}" if title else text


async def arms(
    data_dir: Path,
    collection: str,
    variant_name: str | None,
    embedder: CachedEmbedder,
    texts: dict[str, str],
    limit: int,
    variant_dir: Path,
) -> tuple[dict[str, dict[str, Replay]], dict[str, Any]]:
    """Replays of the unchanged engine ("question") and, with a variant, of the variant, for
    the same queries; and what the variant changed."""
    settings = settings_for(data_dir)
    facts: dict[str, Any] = {}

    async def replays_in(
        directory: Path, queries: dict[str, str], query_embedder: CachedEmbedder = embedder
    ) -> dict[str, Replay]:
        engine = await LanceDBEngine.open(directory, policy=settings.engine.index_policy())
        try:
            facts.setdefault("chunks", (await engine.describe(collection)).chunk_count)
            return await replays_of(engine, query_embedder, collection, queries, limit)
        finally:
            await engine.close()

    runs = {"question": await replays_in(data_dir, texts)}
    if variant_name is None:
        return runs, facts
    variant = VARIANTS[variant_name]
    if variant.feedback is not None:
        database = await lancedb.connect_async(str(data_dir))
        table = await database.open_table(collection)
        engine = await LanceDBEngine.open(data_dir, policy=settings.engine.index_policy())
        try:
            runs[variant_name] = await replays_of(
                engine, embedder, collection, texts, limit, feedback=variant.feedback, table=table
            )
        finally:
            await engine.close()
    elif variant.query_embedder is not None:
        cache = variant_dir.with_name(variant_dir.name + "-query-vectors.npz")
        candidate = CachedEmbedder(variant.query_embedder(), cache)
        runs[variant_name] = await replays_in(data_dir, texts, candidate)
    elif variant.query is not None:
        rewritten = {q: variant.query(t) for q, t in texts.items()}
        facts["queries_rewritten"] = sum(rewritten[q] != t for q, t in texts.items())
        runs[variant_name] = await replays_in(data_dir, rewritten)
    else:
        changed = await variant_collection(data_dir, variant_dir, collection, variant, embedder)
        facts["chunks_changed"] = changed
        runs[variant_name] = await replays_in(variant_dir, texts)
    return runs, facts


async def demo_figures(
    data_dir: Path,
    embedder: CachedEmbedder,
    variant: str | None,
    variant_dir: Path,
    questions: str = "tuned",
) -> dict[str, Any]:
    fusions = strategies(settings_for(data_dir).fusion.to_fusion())
    chosen = question_set(questions)
    answering = {key: set(q.documents) for key, q in chosen.items()}
    texts = {key: q.text for key, q in chosen.items()}
    runs, facts = await arms(data_dir, COLLECTION, variant, embedder, texts, PAGE, variant_dir)
    rows = {
        run: {
            label: per_question(
                {q: first_answer_rank(r, fusion, answering[q]) for q, r in replays.items()}
            )
            for label, fusion in fusions.items()
        }
        for run, replays in runs.items()
    }
    result: dict[str, Any] = {
        "question_set": questions,
        "questions": len(chosen),
        **facts,
        "figures": {run: {s: summary(r) for s, r in by.items()} for run, by in rows.items()},
        "hybrid_minus_better_side": {
            m: paired(
                {q: v[m] for q, v in rows["question"]["HYBRID"].items()},
                {q: v[m] for q, v in rows["question"]["SEMANTIC"].items()},
            )
            for m in ("at_1", "mrr@10")
        },
        "first_hit_rank": {
            run: {s: {q: _rank(v) for q, v in r.items()} for s, r in by.items()}
            for run, by in rows.items()
        },
    }
    if variant:
        result["variant_minus_question"] = {
            s: {
                m: paired(
                    {q: v[m] for q, v in rows[variant][s].items()},
                    {q: v[m] for q, v in rows["question"][s].items()},
                )
                for m in ("at_1", "top_3", "top_10", "mrr@10")
            }
            for s in fusions
        }
    return result


def _rank(row: dict[str, float]) -> int | None:
    return round(1 / row["mrr@10"]) if row["mrr@10"] else None


async def beir_figures(
    dataset: Path, name: str, work_dir: Path, variant: str, variant_dir: Path
) -> dict[str, Any]:
    """nDCG@10 of each strategy on a BEIR collection built by `bench/eval_beir.py` in
    `work_dir`: the unchanged engine vs the variant, paired. The query vectors come from
    `work_dir/vectors.npz` (read, never written: new vectors go to `variant_dir`)."""
    data = load_beir(dataset, split="test")
    cache = variant_dir.with_name(variant_dir.name + "-vectors.npz")
    if not cache.exists():
        await asyncio.to_thread(shutil.copyfile, work_dir / "vectors.npz", cache)
    embedder = cached_embedder(cache)
    fusions = strategies(settings_for(work_dir).fusion.to_fusion())
    runs, facts = await arms(
        work_dir / "lance", name, variant, embedder, data.queries, CANDIDATES, variant_dir
    )
    out: dict[str, Any] = {"queries": len(data.queries), **facts}
    out.update(paired_ndcg(runs[variant], runs["question"], fusions, data, arm="variant"))
    note(f"{name}: {out}")
    return out


def paired_ndcg(
    changed: dict[str, Replay],
    unchanged: dict[str, Replay],
    fusions: dict[str, Fusion],
    data: SciFact,
    *,
    arm: str,
) -> dict[str, dict[str, Any]]:
    """nDCG@10 of each strategy with and without a change (`arm` names it), paired per query."""
    out: dict[str, dict[str, Any]] = {}
    for label, fusion in fusions.items():
        a = per_query_ndcg(replayed(changed, fusion), data)
        b = per_query_ndcg(replayed(unchanged, fusion), data)
        out[label] = {
            "ndcg@10_question": round(sum(b.values()) / len(b), 4),
            f"ndcg@10_{arm}": round(sum(a.values()) / len(a), 4),
            f"{arm}_minus_question": paired(a, b),
        }
    return out


async def build(data_dir: Path) -> None:
    from bench.harness import running_search_tool
    from quarry_cli.demo.build import ensure_demo_collection

    async with running_search_tool(settings_for(data_dir)) as address:
        status = await ensure_demo_collection(address, collection=COLLECTION, timeout_s=1800)
    note(f"demo collection: {status}")


async def settled(data_dir: Path) -> None:
    """Fold every row of the demo collection into its indexes and compact it, as a running
    search tool's maintenance does once writes pause: the state a search tool serves. A build
    can end before that (the bench's in-process search tool stops with it), leaving rows outside
    the BM25 index that are scored apart from it: session 13's build had 487 of 2,064, and a
    replay of it ranked 12 of the 150 held-out questions' pages otherwise than the service
    does once settled. Writes to `data_dir` only when something is unindexed."""
    policy = settings_for(data_dir).engine.index_policy()
    engine = await LanceDBEngine.open(data_dir, policy=policy)
    try:
        await engine.refresh(COLLECTION)
    finally:
        await engine.close()


async def run(args: argparse.Namespace) -> dict[str, Any]:
    if args.build:
        await build(args.data_dir)
    await settled(args.data_dir)
    embedder = cached_embedder(args.data_dir / "first-search-vectors.npz")
    result: dict[str, Any] = {
        "bench": "first_search",
        "command": " ".join(["python bench/first_search.py", *sys.argv[1:]]),
        "page": PAGE,
        "variant": args.variant,
        **await demo_figures(
            args.data_dir,
            embedder,
            args.variant,
            args.scratch / f"demo-{args.variant}",
            args.questions,
        ),
    }
    if args.variant and args.beir:
        result["held_out"] = {}
        for spec in args.beir:
            dataset, work_dir = spec.split(":", 1)
            name = Path(dataset).name
            result["held_out"][name] = await beir_figures(
                Path(dataset),
                name,
                Path(work_dir),
                args.variant,
                args.scratch / f"{name}-{args.variant}",
            )
    result["machine"] = machine()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", type=Path, default=VAR_DIR / "bench-answer-quality")
    parser.add_argument("--build", action="store_true", help="bring the demo collection up to date")
    parser.add_argument("--variant", choices=sorted(VARIANTS))
    add_question_set_argument(parser)
    parser.add_argument("--beir", action="append", default=[], metavar="DATASET:WORK_DIR")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument(
        "--scratch",
        type=Path,
        default=VAR_DIR / "first-search",
        help="where a document variant's copies of the collections are built",
    )
    args = parser.parse_args()
    emit(asyncio.run(run(args)), args.out)


if __name__ == "__main__":
    main()
