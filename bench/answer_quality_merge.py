"""One figure from several `bench/answer_quality.py` runs, and a paired comparison of two.

A local-model run over the 48 questions takes hours, so the set is asked in pieces (`--start N`,
several model servers) and each piece writes its own result file. This merges the pieces of one
configuration (`route/mode`; a question asked in more than one file counts once, from the last
file given) and prints the bench's own summary of the merged runs; with `--baseline FILES` it also
pairs the runs question by question against another merge (what got better and worse, and a
two-sided exact sign test on the questions that differ).

    python -m bench.answer_quality_merge --config local/fast FILE [FILE ...]
                                         [--baseline FILE [FILE ...]] [--baseline-config C]
                                         [--require-all]

`--baseline-config`: the baseline's configuration when it is another one (THINKING against
FAST on the same questions: `--config local/thinking --baseline-config local/fast`).

`--require-all`: fail unless every question of the set has a run (a merged figure must not
silently cover fewer questions than it claims).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from bench.answer_quality import summary
from bench.answer_quality_questions import QUESTIONS

METRICS = ("cited_right_document", "contains_fact")


def merged_runs(paths: Iterable[Path], config: str) -> dict[str, dict[str, Any]]:
    """The runs of `config` in `paths`, by question text; a later file's run replaces an
    earlier one's."""
    runs: dict[str, dict[str, Any]] = {}
    for path in paths:
        rows = json.loads(path.read_text(encoding="utf-8")).get("rows", {})
        for row in rows.get(config, []):
            if "question" in row:
                runs[row["question"]] = row
    return runs


def sign_test_p(better: int, worse: int) -> float:
    """Two-sided exact sign test: how likely a split at least this uneven is under no change."""
    n = better + worse
    if n == 0:
        return 1.0
    tail: float = sum(math.comb(n, i) for i in range(min(better, worse) + 1)) / 2**n
    return min(1.0, 2 * tail)


def paired(runs: dict[str, dict[str, Any]], baseline: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Per metric, over the questions both sides asked: each side's count, the questions that
    got better and worse, and the sign test's p."""
    common = [q for q in runs if q in baseline and "error" not in runs[q]]
    common = [q for q in common if "error" not in baseline[q]]
    out: dict[str, Any] = {"questions": len(common)}
    for metric in METRICS:
        now = {q: bool(runs[q][metric]) for q in common}
        before = {q: bool(baseline[q][metric]) for q in common}
        better = sorted(QUESTION_NUMBER[q] for q in common if now[q] and not before[q])
        worse = sorted(QUESTION_NUMBER[q] for q in common if before[q] and not now[q])
        out[metric] = {
            "now": sum(now.values()),
            "baseline": sum(before.values()),
            "better": better,
            "worse": worse,
            "sign_test_p": round(sign_test_p(len(better), len(worse)), 3),
        }
    return out


QUESTION_NUMBER = {q.text: i for i, q in enumerate(QUESTIONS, 1)}


def report(
    paths: Sequence[Path],
    config: str,
    baseline_paths: Sequence[Path] = (),
    *,
    baseline_config: str = "",
    require_all: bool = False,
) -> dict[str, Any]:
    runs = merged_runs(paths, config)
    missing = [n for q, n in QUESTION_NUMBER.items() if q not in runs]
    if require_all and missing:
        raise SystemExit(f"{config}: no run for questions {missing}")
    ordered = [runs[q.text] for q in QUESTIONS if q.text in runs]
    if not ordered:
        raise SystemExit(f"{config}: no runs in {[str(p) for p in paths]}")
    out: dict[str, Any] = {
        "config": config,
        "files": [str(p) for p in paths],
        "questions_missing": missing,
        "summary": summary(ordered),
    }
    if baseline_paths:
        out["baseline_files"] = [str(p) for p in baseline_paths]
        out["baseline_config"] = baseline_config or config
        out["paired"] = paired(runs, merged_runs(baseline_paths, baseline_config or config))
    return out


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--config", default="local/fast", help="route/mode, e.g. local/thinking")
    parser.add_argument("--baseline", nargs="*", type=Path, default=[])
    parser.add_argument("--baseline-config", default="", help="default: --config")
    parser.add_argument("--require-all", action="store_true")
    args = parser.parse_args(argv)
    result = report(
        args.files,
        args.config,
        args.baseline,
        baseline_config=args.baseline_config,
        require_all=args.require_all,
    )
    json.dump(result, sys.stdout, indent=2)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
