"""Two runs of one collection compared query by query: each strategy's nDCG@10 difference and its
95 % paired bootstrap interval (queries resampled), and how many queries moved each way.

    python bench/eval_beir.py --dataset D --work-dir BEFORE --out before.json --per-query
    (change the product; a change to what is indexed needs its own --work-dir)
    python bench/eval_beir.py --dataset D --work-dir AFTER --out after.json --per-query
    python bench/paired_runs.py before.json after.json [--out FILE]

Both runs must hold the same judged queries (`per_query_ndcg@10`, written by `--per-query`).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.eval_beir import paired_interval
from bench.harness import emit, machine

PER_QUERY = "per_query_ndcg@10"


def compared(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """Per strategy: nDCG@10 before, after, after − before with its interval, queries better and
    worse. A strategy missing from either run is left out."""
    if PER_QUERY not in before or PER_QUERY not in after:
        raise ValueError(f"both runs need {PER_QUERY} (bench/eval_beir.py --per-query)")
    out: dict[str, Any] = {}
    for label, was in before[PER_QUERY].items():
        now = after[PER_QUERY].get(label)
        if now is None:
            continue
        if set(now) != set(was):
            raise ValueError(f"{label}: the runs judged different queries")
        mean, low, high = paired_interval(now, was)
        out[label] = {
            "before": round(sum(was.values()) / len(was), 4),
            "after": round(sum(now.values()) / len(now), 4),
            "after_minus_before": {"mean": mean, "ci95": [low, high]},
            "better": sum(now[q] > was[q] for q in was),
            "worse": sum(now[q] < was[q] for q in was),
            "queries": len(was),
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("before", type=Path, help="an eval_beir.py result with --per-query")
    parser.add_argument("after", type=Path, help="the same collection's run after the change")
    parser.add_argument("--out", type=Path, help="JSON result (default: stdout only)")
    args = parser.parse_args()
    before = json.loads(args.before.read_text(encoding="utf-8"))
    after = json.loads(args.after.read_text(encoding="utf-8"))
    result = {
        "bench": "paired_runs",
        "collection": after.get("collection"),
        "before": str(args.before),
        "after": str(args.after),
        "strategies": compared(before, after),
        "machine": machine(),
    }
    if args.out:
        emit(result, args.out)
    else:
        print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
