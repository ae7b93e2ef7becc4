"""Proof that a real model drives Quarry: the local route (Qwen2.5-Coder-1.5B through
llama-cpp-python's server, tool calls forced by JSON schema) answers questions whose facts exist
only in a collection this test builds.

Runs only in `make real-model-proof` (what `.ci/run` calls after `make test`), which prepares the
model first (`make local-model`); `tests/conftest.py` leaves this directory out of the ordinary
suite unless `QUARRY_REAL_MODEL=1`, and with it set a missing model is a failure, never a skip.

Each of the three runs must make only valid tool calls (every call validated, no tool error, every
model turn answered by the local model, not the extractive fallback), search at least once, and
cite only result ids its searches showed; at least two of the three answers must contain the fact.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from quarry.agent.v1 import agent_pb2
from quarry.searchtool.v1 import search_tool_pb2, search_tool_pb2_grpc

from bench.local_model_stack import LocalStack, cpu_seconds, local_model_stack, model_rss_mb
from services.agent.client import AgentClient, RunOptions

COLLECTION = "proof-facts"
DOCUMENTS = [
    (
        "brisk-kettle",
        "Vellmar Brisk-7 kettle",
        "The Brisk-7 is an electric kettle made by Vellmar Kettle Works. It boils 1.2 litres of "
        "water in 94 seconds and switches itself off when the lid is opened.",
    ),
    (
        "orlen-observatory",
        "Orlen Tide Observatory",
        "The Orlen Tide Observatory on the island of Skarvø was founded in 1987 by the marine "
        "biologist Ilse Varga. It records tide heights every six minutes.",
    ),
    (
        "quillon-protocol",
        "The Quillon protocol",
        "Quillon is a message protocol for greenhouse sensors. A Quillon gateway listens on TCP "
        "port 7431 by default and batches readings every 30 seconds.",
    ),
    (
        "marrow-bridge",
        "Marrow Bridge",
        "Marrow Bridge is a footbridge over the river Elde, opened in 1912 and rebuilt in 1978.",
    ),
    (
        "teal-lantern",
        "Teal Lantern festival",
        "The Teal Lantern festival takes place each October in the town of Hovel Cross and ends "
        "with a parade of paper boats.",
    ),
    (
        "sorrel-compiler",
        "Sorrel compiler",
        "Sorrel is a toy compiler for a stack language; its optimiser folds constants and removes "
        "dead branches.",
    ),
]
QUESTIONS = [
    ("How long does the Brisk-7 kettle take to boil water?", "94 seconds", "brisk-kettle"),
    ("Who founded the Orlen Tide Observatory?", "Ilse Varga", "orlen-observatory"),
    ("Which port does a Quillon gateway listen on by default?", "7431", "quillon-protocol"),
]
"""Question, the fact its answer must contain, the document that holds it."""
RUN_TIMEOUT_S = float(os.environ.get("QUARRY_REAL_MODEL_RUN_TIMEOUT_S", "900"))
"""Per question, and per model call. A quiet 2-core machine needs about 1-3 minutes; a busy one
many times that."""
RESULTS = Path(__file__).resolve().parents[2] / "bench" / "results" / "real_model_proof.json"
EXPAND = os.environ.get("QUARRY_REAL_MODEL_EXPAND") == "1"
"""Also expand each search's query with a passage the model writes (`agent.loop.expand_queries`):
one more model call a search. Off in CI; its report then goes beside the proof's, not over it."""


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    root = tmp_path_factory.mktemp("real-model")
    with local_model_stack(root, call_timeout_s=RUN_TIMEOUT_S, expand=EXPAND) as started:
        with grpc.insecure_channel(started.search_tool) as channel:
            search_tool_pb2_grpc.SearchToolServiceStub(channel).UpsertDocuments(
                search_tool_pb2.UpsertDocumentsRequest(
                    collection=COLLECTION,
                    documents=[
                        search_tool_pb2.Document(
                            id=doc_id, title=title, text=text, source="proof", entity_type="fact"
                        )
                        for doc_id, title, text in DOCUMENTS
                    ],
                ),
                timeout=120,
            )
        yield started


def _seen_ids(response: agent_pb2.RunResponse) -> set[str]:
    return {
        result_id
        for step in response.steps
        for call in step.tool_calls
        if call.name != "submit_answer"
        for result_id in call.result_ids
    }


def _check_run(response: agent_pb2.RunResponse) -> list[str]:
    """What is wrong with one run's tool calls and citations (empty: nothing)."""
    problems: list[str] = []
    calls = [call for step in response.steps for call in step.tool_calls]
    for step in response.steps:
        if step.answered_by.provider != "local":
            problems.append(f"step {step.index} answered by {step.answered_by.provider!r}")
    for call in calls:
        if call.error or not call.validated_arguments_json:
            problems.append(f"invalid {call.name} call {call.arguments_json!r}: {call.error}")
    if not any(call.name == "search" for call in calls):
        problems.append("no search")
    seen = _seen_ids(response)
    for call in calls:
        if call.name != "submit_answer":
            continue
        written = json.loads(call.arguments_json or "{}").get("citations") or []
        for citation in written:
            cited = citation.get("result_id") if isinstance(citation, dict) else citation
            if cited not in seen:
                problems.append(f"the model cited {cited!r}, never shown to it")
    for citation in response.answer.citations:
        if citation.result_id not in seen:
            problems.append(f"the answer cites {citation.result_id!r}, never seen")
    if response.stop_reason != agent_pb2.STOP_REASON_ANSWERED:
        problems.append(f"stop reason {agent_pb2.StopReason.Name(response.stop_reason)}")
    return problems


# each question has its own bound (RUN_TIMEOUT_S); the suite-wide 600 s limit would cut the proof
# short on a slow machine, so this test's limit is theirs together plus the stack's start
@pytest.mark.timeout(len(QUESTIONS) * RUN_TIMEOUT_S + 600)
async def test_the_local_model_answers_from_the_collection_with_valid_calls_and_citations(
    stack: LocalStack,
) -> None:
    runs: list[dict[str, object]] = []
    async with AgentClient(stack.agent) as agent:
        for question, fact, source in QUESTIONS:
            started = time.perf_counter()
            cpu_before = cpu_seconds(stack.pids["model"])
            response = await agent.run(
                question,
                RunOptions(
                    collection=COLLECTION,
                    mode="fast",
                    tools=("search",),
                    timeout_s=RUN_TIMEOUT_S,
                    temperature=0.0,  # greedy: the same answers on every CI run
                    seed=7,
                ),
            )
            runs.append(
                {
                    "question": question,
                    "fact": fact,
                    "answer": response.answer.text,
                    "citations": [c.result_id for c in response.answer.citations],
                    "has_fact": fact.lower() in response.answer.text.lower(),
                    "cites_source": any(
                        c.result_id.startswith(f"{source}__") for c in response.answer.citations
                    ),
                    "problems": _check_run(response),
                    "model_calls": response.usage.model_calls,
                    "calls_beside_turns": response.usage.model_calls - len(response.steps),
                    "searches": response.usage.searches,
                    "seconds": round(time.perf_counter() - started, 1),
                    "model_cpu_s": round(cpu_seconds(stack.pids["model"]) - cpu_before, 1),
                }
            )
    answers_with_fact = sum(bool(r["has_fact"]) for r in runs)
    answers_citing_source = sum(bool(r["cites_source"]) for r in runs)
    report = {
        "runs": runs,
        "answers_with_fact": answers_with_fact,
        "answers_citing_the_source": answers_citing_source,
        "model_rss_mb": round(model_rss_mb(stack.pids["model"])),
        "load_average_1m": round(os.getloadavg()[0], 2),
        "expand_queries": EXPAND,
    }
    results = RESULTS.with_name("real_model_proof_expand.json") if EXPAND else RESULTS
    results.parent.mkdir(parents=True, exist_ok=True)
    results.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n")
    print(json.dumps(report, indent=2, ensure_ascii=False))
    assert [r["problems"] for r in runs] == [[], [], []]
    if EXPAND:  # a search's passage is a model call beside the model's turns
        assert all(r["calls_beside_turns"] == r["searches"] for r in runs), runs
    assert answers_with_fact >= 2, runs
    assert answers_citing_source >= 2, runs  # a constrained answer must cite a seen result
