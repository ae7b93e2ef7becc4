"""Answer quality through the real services: the offline `extractive` answerer and the local model
(`make local-model`), FAST and THINKING, over paraphrased questions about the demo collection
with known answering documents (`bench/answer_quality_questions.py`: `--question-set` the first
48, the 150 held out, or all).

    python -m bench.answer_quality [--routes extractive,local] [--modes fast,thinking]
                                   [--question-set tuned|held-out|all] [--questions N]
                                   [--local-questions 12] [--tools search]
                                   [--start 1] [--port-base PORT]

Starts the model server (when `local` is asked for) and the three services as processes
(`bench/local_model_stack.py`), builds the demo collection once into `var/bench-answer-quality/`
(kept between runs), then asks every question under every route × mode, interleaved (question
outer, configuration inner), so a busy machine slows all configurations alike. `--local-questions`
caps how many questions (the first N) the local model is asked: at ~1-5 min per run on one
thread, 48 × 2 modes is hours.

Per configuration: `cited_right_document` (a citation's document is one of the answering
documents), `contains_fact` (the answer contains one of the question's fact strings,
case-insensitive), `searches_per_run`, `seconds_per_run` (p50 and mean), `fallbacks` (runs in which
a turn fell back from the local model to `extractive`), `model_cpu_s_per_run` for the local model
(its server's CPU time: what the run costs on an idle core, whatever the load). Prints one JSON
object and writes `bench/results/answer_quality.json`, with the machine's load.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.answer_quality_questions import Question, add_question_set_argument, question_set
from bench.harness import RESULTS_DIR, VAR_DIR, emit, machine, note
from bench.local_model_stack import cpu_seconds, local_model_stack, model_rss_mb
from services.agent.client import AgentClient, AgentError, ModeName, RunOptions

COLLECTION = "python-docs"
RESULTS = RESULTS_DIR / "answer_quality.json"


def document_of(result_id: str) -> str:
    return result_id.split("__chunk_", 1)[0]


async def ask(
    agent: AgentClient,
    question: Question,
    route: str,
    mode: ModeName,
    tools: tuple[str, ...],
    timeout_s: float,
) -> dict[str, Any]:
    started = time.perf_counter()
    options = RunOptions(
        collection=COLLECTION,
        mode=mode,
        route=route,
        tools=tools,
        timeout_s=timeout_s,
        temperature=0.0,
        seed=7,
    )
    try:
        response = await agent.run(question.text, options)
    except AgentError as error:
        return {"error": str(error), "seconds": round(time.perf_counter() - started, 1)}
    cited = [c.result_id for c in response.answer.citations]
    text = response.answer.text
    return {
        "answer": text,
        "cited": cited,
        "cited_right_document": any(document_of(c) in question.documents for c in cited),
        "contains_fact": any(f.lower() in text.lower() for f in question.facts),
        "searches": response.usage.searches,
        "fallback": response.answered_by.fallback,
        "fallback_reason": response.answered_by.fallback_reason,
        "answered_by": response.answered_by.provider,
        "seconds": round(time.perf_counter() - started, 1),
    }


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    answered = [r for r in rows if "error" not in r]
    n = len(rows)
    seconds = [r["seconds"] for r in rows]
    out: dict[str, Any] = {
        "runs": n,
        "errors": n - len(answered),
        "cited_right_document": round(sum(r["cited_right_document"] for r in answered) / n, 3),
        "contains_fact": round(sum(r["contains_fact"] for r in answered) / n, 3),
        "searches_per_run": round(statistics.fmean(r["searches"] for r in answered), 2)
        if answered
        else None,
        "seconds_per_run_p50": round(statistics.median(seconds), 1),
        "seconds_per_run_mean": round(statistics.fmean(seconds), 1),
        "fallbacks": sum(bool(r.get("fallback")) for r in answered),
    }
    cpu = [r["model_cpu_s"] for r in rows if "model_cpu_s" in r]
    if cpu:
        out["model_cpu_s_per_run"] = round(statistics.fmean(cpu), 1)
    return out


async def run_all(args: argparse.Namespace, agent_address: str, model_pid: int | None) -> Any:
    questions = list(question_set(args.question_set).values())[: args.questions]
    configs: list[tuple[str, ModeName]] = [
        (route, "thinking" if mode == "thinking" else "fast")
        for route in args.routes
        for mode in args.modes
    ]
    rows: dict[str, list[dict[str, Any]]] = {f"{r}/{m}": [] for r, m in configs}
    tools = tuple(args.tools)
    async with AgentClient(agent_address) as agent:
        for index, question in enumerate(questions):
            if index + 1 < args.start:
                continue
            for route, mode in configs:
                if route != "extractive" and index >= args.local_questions:
                    continue
                before = cpu_seconds(model_pid) if model_pid else 0.0
                row = await ask(agent, question, route, mode, tools, args.run_timeout_s)
                if model_pid and route != "extractive":
                    row["model_cpu_s"] = round(cpu_seconds(model_pid) - before, 1)
                row["question"] = question.text
                rows[f"{route}/{mode}"].append(row)
                _write_partial(args.out, rows, index + 1)
                note(
                    f"[{index + 1}/{len(questions)}] {route}/{mode}: "
                    f"doc={row.get('cited_right_document')} fact={row.get('contains_fact')} "
                    f"searches={row.get('searches')} {row['seconds']} s"
                )
    return rows


def _write_partial(out: Path, rows: dict[str, list[dict[str, Any]]], asked: int) -> None:
    """The runs so far, beside `out` (`<out>.partial.json`), so a long local-model run cut short
    still leaves its figures, each for the questions it actually ran."""
    partial = {
        "partial": True,
        "questions_started": asked,
        "summary": {config: summary(r) for config, r in rows.items() if r},
        "machine": machine(),
        "rows": rows,
    }
    path = out.with_suffix(".partial.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(partial, indent=2) + "\n", encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--routes", type=lambda s: s.split(","), default=["extractive", "local"])
    parser.add_argument("--modes", type=lambda s: s.split(","), default=["fast", "thinking"])
    add_question_set_argument(parser, "--question-set")
    parser.add_argument("--questions", type=int, help="the set's first N only (default: all)")
    parser.add_argument("--local-questions", type=int, default=12)
    parser.add_argument(
        "--start",
        type=int,
        default=1,
        help="the first question asked (1-based): resumes a run cut short",
    )
    parser.add_argument("--tools", type=lambda s: s.split(","), default=["search"])
    parser.add_argument("--data-dir", type=Path, default=VAR_DIR / "bench-answer-quality")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument(
        "--run-timeout-s",
        type=float,
        default=1200.0,
        help="per run, and per local model call (a busy machine needs more)",
    )
    parser.add_argument(
        "--port-base",
        type=int,
        default=None,
        help="the model server and the three services on this port and the next three "
        "(default: free ports the system picks)",
    )
    args = parser.parse_args()
    size = len(question_set(args.question_set))
    args.questions = size if args.questions is None else min(args.questions, size)
    from quarry_cli.demo.build import ensure_demo_collection

    started = time.perf_counter()
    with (
        tempfile.TemporaryDirectory(prefix="answer-quality-") as root,
        local_model_stack(
            Path(root),
            data_dir=args.data_dir,
            with_model="local" in args.routes,
            port_base=args.port_base,
            call_timeout_s=args.run_timeout_s,
        ) as stack,
    ):
        note(f"services up ({time.perf_counter() - started:.0f} s); demo collection ...")
        status = asyncio.run(
            ensure_demo_collection(stack.search_tool, collection=COLLECTION, timeout_s=1800)
        )
        note(f"demo collection: {status.documents} documents")
        model_pid = stack.pids["model"] if "local" in args.routes else None
        rows = asyncio.run(run_all(args, stack.agent, model_pid))
        rss = model_rss_mb(model_pid) if model_pid else 0.0
    result = {
        "question_set": args.question_set,
        "questions": args.questions,
        "local_questions": min(args.local_questions, args.questions),
        "start": args.start,
        "tools": args.tools,
        "summary": {config: summary(r) for config, r in rows.items() if r},
        "model_rss_mb": round(rss),
        "machine": machine(),
        "rows": rows,
    }
    emit(result, args.out)


if __name__ == "__main__":
    main()
