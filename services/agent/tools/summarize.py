"""The opt-in `summarize` tool: seen results condensed through the gateway, citations checked.

The model names result ids it has seen and a focus. The agent sends the full texts of those
results (whole, in the order named, until `loop.summarize_max_chars`; what does not fit is left
out and named) to the gateway's `GenerateStructured` with the schema of `Summary` and
`schema_name` `summary` (docs/agent-tool-contract.md; the offline `extractive` provider answers
it with the sentences closest to the focus). Every id the summary cites is checked against the
results sent: unknown ids are dropped and named. The summary is shown in place of the full texts:
earlier tool results keep each summarised result's `### [id] title` line (still citable) with its
text replaced by a pointer to the summary, and `read` still gives the full text. The summary's
tokens count in the run's budget and usage, and the call is recorded in its step.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import BaseModel, Field

from services.agent.messages import Message, Role
from services.agent.search import SearchHit

SUMMARIZE = "summarize"
SUMMARY_SCHEMA_NAME = "summary"
"""GenerateStructured's `schema_name`: the contract the gateway's extractive provider knows."""
MAX_SUMMARIZE_IDS = 20
MAX_FOCUS_CHARS = 300
CUT_MARK = " … [cut: the summary's input bound]"

DESCRIPTION = (
    "Condense results you have already seen into a short summary focused on what you need, so "
    "many long results take little room. Name the result ids and the focus; the summary cites "
    "the ids it draws on. Cite the original result ids in your answer (never the summary); "
    "`read` still gives a result's full text."
)
SYSTEM_PROMPT = (
    "You condense search results for a research assistant. Answer only from the results "
    "given; write short points, each citing the result ids (as given in `### [id]`) it draws "
    "on. Leave out what does not concern the focus. Never cite an id that is not given."
)


class SummarizePlan(BaseModel):
    """Arguments of the `summarize` tool."""

    result_ids: list[str] = Field(
        min_length=1,
        max_length=MAX_SUMMARIZE_IDS,
        description="Ids of results you have seen (the id in `### [result_id] title`).",
    )
    focus: str = Field(
        min_length=1,
        max_length=MAX_FOCUS_CHARS,
        description="What the summary is for: the part of the question these results answer.",
    )


class SummaryPoint(BaseModel):
    """One point of a summary."""

    text: str = Field(min_length=1, max_length=2_000)
    result_ids: list[str] = Field(default_factory=list, max_length=MAX_SUMMARIZE_IDS)


class Summary(BaseModel):
    """What the gateway returns (its JSON schema is the GenerateStructured schema)."""

    summary: str = Field(max_length=8_000)
    points: list[SummaryPoint] = Field(default_factory=list, max_length=MAX_SUMMARIZE_IDS)


@dataclass(frozen=True)
class SummaryInput:
    """The user message sent to the gateway and what it holds."""

    text: str
    included: tuple[SearchHit, ...]
    """The results sent, in the order named."""
    left_out: tuple[str, ...]
    """Ids named but not sent: the input bound was reached."""
    chars: int
    """Characters of result text sent."""


def summary_input(focus: str, hits: Sequence[SearchHit], *, max_chars: int) -> SummaryInput:
    """`## Focus` and `## Results` (the results' full texts, whole, until `max_chars`; the first
    result is cut to the bound rather than sent with nothing)."""
    blocks: list[str] = []
    used = 0
    for hit in hits:
        text = hit.text
        room = max_chars - used - len(_block(hit, ""))
        if len(text) > room:
            if blocks:
                break
            text = text[: max(room - len(CUT_MARK), 0)].rsplit(" ", 1)[0] + CUT_MARK
        blocks.append(_block(hit, text))
        used += len(blocks[-1])
    included = tuple(hits[: len(blocks)])
    left_out = tuple(h.id for h in hits[len(blocks) :])
    message = f"## Focus\n{focus}\n\n## Results\n" + "".join(blocks)
    return SummaryInput(message, included, left_out, used)


def _block(hit: SearchHit, text: str) -> str:
    meta = f"source: {hit.source} | entity_type: {hit.entity_type} | url: {hit.url}"
    return f"### [{hit.id}] {hit.title}\n{meta}\n{text}\n\n"


@dataclass(frozen=True)
class CheckedSummary:
    summary: str
    points: tuple[SummaryPoint, ...]
    """Each point's ids restricted to the results sent (first occurrence order)."""
    cited: tuple[str, ...]
    """Every id the checked points cite, in order."""
    unknown: tuple[str, ...]
    """Ids the summary cited that were not sent: dropped."""


def check_summary(summary: Summary, sent: Sequence[str]) -> CheckedSummary:
    """Keep only citations of results that were sent; name the others."""
    allowed = set(sent)
    points: list[SummaryPoint] = []
    cited: list[str] = []
    unknown: list[str] = []
    for point in summary.points:
        ids = list(dict.fromkeys(i for i in point.result_ids if i in allowed))
        unknown += [i for i in point.result_ids if i not in allowed and i not in unknown]
        cited += [i for i in ids if i not in cited]
        points.append(SummaryPoint(text=point.text, result_ids=ids))
    return CheckedSummary(summary.summary, tuple(points), tuple(cited), tuple(unknown))


def format_summary(
    checked: CheckedSummary, focus: str, included: Sequence[str], left_out: Sequence[str]
) -> str:
    """The tool result the model reads."""
    lines = [f"Summary of {len(included)} results (focus: {focus}):", checked.summary.strip()]
    if checked.points:
        lines.append("")
        for point in checked.points:
            ids = f" [{', '.join(point.result_ids)}]" if point.result_ids else " [no source]"
            lines.append(f"- {point.text.strip()}{ids}")
    if checked.unknown:
        dropped = ", ".join(checked.unknown)
        lines.append(f"\nIgnored citations of results that were not summarised: {dropped}.")
    if left_out:
        lines.append(
            f"\nNot summarised (the input bound was reached): {', '.join(left_out)}. Summarise "
            "them in another call if you need them."
        )
    lines.append(
        "\nThe summarised results' texts are replaced by this summary above; cite the result "
        "ids, and `read` a result for its full text."
    )
    return "\n".join(lines) + "\n"


_BLOCK = re.compile(r"(^### \[(?P<id>[^\]\n]+)\][^\n]*\n)(?P<body>.*?)(?=^### \[|\Z)", re.M | re.S)


def condense_results(
    messages: Sequence[Message], ids: Sequence[str], call_id: str
) -> list[Message]:
    """`messages` with the text of each result in `ids` replaced, in tool results and full-text
    messages, by a pointer to the summary of call `call_id`: its `### [id] title` line stays, so
    the result stays citable and every call stays paired with its result."""
    wanted = set(ids)
    pointer = f"(summarised by summarize call {call_id}; `read` gives the full text)\n\n"

    def replace(match: re.Match[str]) -> str:
        if match.group("id").strip() not in wanted:
            return match.group(0)
        return match.group(1) + pointer

    condensed = []
    for message in messages:
        if message.role in (Role.TOOL, Role.USER) and "### [" in message.text:
            message = message.with_text(_BLOCK.sub(replace, message.text))
        condensed.append(message)
    return condensed
