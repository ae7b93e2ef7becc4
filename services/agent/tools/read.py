"""The `read` tool: the passage around a result the model saw, or its whole document."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, Field

from services.agent.messages import ToolCall
from services.agent.search import ReadRequest, SearchHit
from services.agent.tools.base import (
    FAILURES_THAT_END_THE_RUN,
    Tool,
    ToolArgumentsError,
    ToolContext,
    ToolEvent,
    ToolOutcome,
    parse_arguments,
)
from services.agent.tools.results import FormattedResults
from services.common.errors import QuarryError

READ = "read"
MAX_NEIGHBOURS = 10
MAX_READ_CHUNKS = 200


class ReadPlan(BaseModel):
    """Arguments of the `read` tool."""

    result_id: str = Field(
        min_length=1,
        description="Id of a result you saw (the id in `### [result_id] title`); its document is "
        "read.",
    )
    scope: Literal["around", "document"] = Field(
        default="around",
        description="around: the result's chunk with `neighbours` chunks before and after it; "
        "document: the whole document from its first chunk, as far as the budget allows.",
    )
    neighbours: int = Field(
        default=2, ge=0, le=MAX_NEIGHBOURS, description="around: chunks on each side."
    )


@dataclass(frozen=True)
class Reading(ToolEvent):
    """A `read` call, as executed."""

    WIRE_FIELD: ClassVar[str] = "reading"

    iteration: int
    """Searches done before the call."""
    result_id: str
    """The result whose document was read."""
    document_id: str
    first_chunk: int
    chunks_shown: int
    """Chunks shown to the model (within the budget)."""
    chunk_count: int
    """Chunks of the document the caller may see."""
    duration_ms: int
    error: str = ""
    """Why the read did not run or failed (the tool error the model read)."""

    def wire(self) -> dict[str, Any]:
        return {
            "iteration": self.iteration,
            "result_id": self.result_id,
            "document_id": self.document_id,
            "first_chunk": self.first_chunk,
            "chunks_shown": self.chunks_shown,
            "chunk_count": self.chunk_count,
            "duration_ms": self.duration_ms,
            "error": self.error,
        }


class ReadTool(Tool):
    position = 20
    name = READ
    description = (
        "Read more of a document a result came from: the passage around the result, or the "
        "whole document. Use it when a result is cut off, refers to text before or after it, or "
        "the answer needs the full context."
    )
    arguments = ReadPlan
    prompt_line = (
        "- `read`: read more of a document a result came from: the passage around the "
        "result, or the whole document."
    )

    async def run(self, call: ToolCall, context: ToolContext) -> ToolOutcome:
        """The chunks around a seen result, or its whole document."""
        try:
            plan = parse_arguments(ReadPlan, call.arguments_json)
        except ToolArgumentsError as error:
            return context.failed(call, str(error), _refused(context, "", str(error)))
        hit = context.seen.get(plan.result_id)
        if hit is None:
            text = (
                f"{plan.result_id!r} is not a result you have seen in this conversation. "
                "Read only ids shown in results (`### [result_id] title`)."
            )
            return context.failed(call, text, _refused(context, plan.result_id, text))
        around = plan.scope == "around"
        request = ReadRequest(
            collection=context.request.collection,
            document_id=hit.document_id,
            first_chunk=max(hit.chunk_index - plan.neighbours, 0) if around else 0,
            max_chunks=2 * plan.neighbours + 1 if around else MAX_READ_CHUNKS,
            caller_filter=context.request.caller_filter,
        )
        started = time.perf_counter()
        try:
            document = await context.search.read_document(
                request, remaining_s=context.deadline.remaining()
            )
        except FAILURES_THAT_END_THE_RUN:
            raise
        except QuarryError as error:
            text = f"The read failed: {error.message}."
            failed = replace(
                _refused(context, plan.result_id, text),
                document_id=hit.document_id,
                first_chunk=request.first_chunk,
                duration_ms=int((time.perf_counter() - started) * 1000),
            )
            return context.failed(call, text, failed)
        duration_ms = int((time.perf_counter() - started) * 1000)
        formatted = format_read(
            hit.document_id, document.chunks, document.chunk_count, max_chars=context.budget_chars
        )
        event = Reading(
            iteration=context.iteration,
            result_id=plan.result_id,
            document_id=hit.document_id,
            first_chunk=request.first_chunk,
            chunks_shown=len(formatted.shown),
            chunk_count=document.chunk_count,
            duration_ms=duration_ms,
            step=context.step,
        )
        return ToolOutcome(
            call,
            formatted.text,
            event=event,
            shown=tuple(formatted.shown),
            read_in_full=tuple(h.id for h in formatted.shown),
            arguments=plan.model_dump_json(),
            duration_ms=duration_ms,
            total_count=document.chunk_count,
            ran=True,
        )


def _refused(context: ToolContext, result_id: str, error: str) -> Reading:
    """The event of a read that showed nothing."""
    return Reading(context.iteration, result_id, "", 0, 0, 0, 0, error=error, step=context.step)


def format_read(
    document_id: str, chunks: Sequence[SearchHit], chunk_count: int, *, max_chars: int
) -> FormattedResults:
    """A read's chunks in order until the budget is spent; a chunk is never cut."""
    blocks: list[str] = []
    used = 0
    for chunk in chunks:
        block = _read_block(chunk)
        if used + len(block) > max_chars:
            break
        blocks.append(block)
        used += len(block)
    shown = list(chunks[: len(blocks)])
    if shown:
        span = f"chunks {shown[0].chunk_index}-{shown[-1].chunk_index} of {chunk_count}"
    else:
        span = f"no chunk fits the budget ({chunk_count} chunks)"
    return FormattedResults(text=f"Read {document_id}: {span}.\n" + "".join(blocks), shown=shown)


def _read_block(hit: SearchHit) -> str:
    meta = f"source: {hit.source} | entity_type: {hit.entity_type} | url: {hit.url}"
    return f"\n### [{hit.id}] {hit.title}\n{meta}\n{hit.text}\n"


TOOL = ReadTool()
"""This module's tool, found by the registry."""
