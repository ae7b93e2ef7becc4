"""The agent API's protobuf edge (`quarry.agent.v1`) <-> agent domain: run requests and their
question windows in, run responses, step records and stream events out. The caller's filter
comes in as the domain `CallerFilter`, losslessly (`filter_wire`): the search tool validates it.

The other wire protocols convert beside their clients: the search tool's in
`search_tool_client.py`, the LLM gateway's in `gateway_client.py`."""

from __future__ import annotations

import math
from collections.abc import Sequence

from google.protobuf import json_format, timestamp_pb2
from quarry.agent.v1 import agent_pb2
from quarry.common.v1 import search_pb2

from services.agent.events import AgentEvent, Done, Failed, Started, Thinking
from services.agent.filter_wire import caller_filter
from services.agent.filters import Scalar
from services.agent.questions import QuestionWindows
from services.agent.records import AnsweredBy, StepRecord, ToolCallRecord
from services.agent.run import MAX_LIMIT, Mode, RunRequest, RunResult, StopReason, Turn
from services.agent.search import SearchHit
from services.agent.tools import DEFAULT_TOOLS, ToolEvent
from services.common.auth import require_caller_permission
from services.common.errors import FieldViolation, InvalidArgument, shown
from services.common.names import collection_name_problem

_MODES = {agent_pb2.MODE_UNSPECIFIED: Mode.FAST, agent_pb2.MODE_FAST: Mode.FAST}
_MODES[agent_pb2.MODE_THINKING] = Mode.THINKING
_MODE_NUMBERS = {Mode.FAST: agent_pb2.MODE_FAST, Mode.THINKING: agent_pb2.MODE_THINKING}
_STOP_REASONS = {
    StopReason.ANSWERED: agent_pb2.STOP_REASON_ANSWERED,
    StopReason.FORCED_ANSWER: agent_pb2.STOP_REASON_FORCED_ANSWER,
    StopReason.BUDGET_EXHAUSTED: agent_pb2.STOP_REASON_BUDGET_EXHAUSTED,
    StopReason.FALLBACK_ANSWER: agent_pb2.STOP_REASON_FALLBACK_ANSWER,
}


# --- requests ------------------------------------------------------------------------------------


def run_request(
    message: agent_pb2.RunRequest | agent_pb2.StreamRunRequest,
    *,
    default_collection: str = "",
    default_limit: int = 10,
    max_query_chars: int = 4_000,
    max_history_turns: int = 20,
    max_history_chars: int = 32_000,
) -> RunRequest:
    """Validate a request and turn it into the domain's, naming every bad field."""
    violations: list[FieldViolation] = []
    query = message.query.strip()
    if not query:
        violations.append(FieldViolation("query", "must not be empty"))
    if len(query) > max_query_chars:
        violations.append(
            FieldViolation(
                "query", f"is {len(query)} characters; max_query_chars is {max_query_chars}"
            )
        )
    if len(message.history) > max_history_turns:
        violations.append(
            FieldViolation(
                "history",
                f"has {len(message.history)} turns; max_history_turns is {max_history_turns}",
            )
        )
    collection = message.collection or default_collection
    if not collection:
        violations.append(FieldViolation("collection", "must name a collection"))
    elif (problem := collection_name_problem(collection)) is not None:
        violations.append(FieldViolation("collection", problem))
    if message.mode not in _MODES:
        violations.append(FieldViolation("mode", f"unknown mode {message.mode}"))
    if not 0 <= message.limit <= MAX_LIMIT:
        violations.append(FieldViolation("limit", f"must be 1..{MAX_LIMIT} (0 means the default)"))
    if message.budget.max_iterations < 0:
        violations.append(FieldViolation("budget.max_iterations", "must not be negative"))
    if message.budget.max_tokens < 0:
        violations.append(FieldViolation("budget.max_tokens", "must not be negative"))
    if message.HasField("temperature") and not 0 <= message.temperature <= 2:
        violations.append(FieldViolation("temperature", "must be between 0 and 2"))
    for i, name in enumerate(message.tools):
        tool = DEFAULT_TOOLS.get(name)
        if tool is None:
            names = ", ".join(DEFAULT_TOOLS.names)
            violations.append(
                FieldViolation(f"tools[{i}]", f"unknown tool {shown(name)}; one of {names}")
            )
        elif tool.needs_caller and isinstance(message, agent_pb2.RunRequest):
            violations.append(
                FieldViolation(
                    f"tools[{i}]",
                    f"{name} needs StreamRun: a unary Run cannot ask the caller anything",
                )
            )
    for name in dict.fromkeys(message.tools):
        tool = DEFAULT_TOOLS.get(name)
        if tool is not None and tool.permission:
            require_caller_permission(tool.permission, f"use the tool {name}")
    violations += _history_violations(message.history, max_query_chars, max_history_chars)
    if violations:
        raise InvalidArgument.for_violations(violations)
    return RunRequest(
        collection=collection,
        query=query,
        caller_filter=caller_filter(message.filter),
        mode=_MODES[message.mode],
        limit=message.limit or default_limit,
        history=tuple(Turn(t.question, t.answer) for t in message.history),
        max_iterations=message.budget.max_iterations,
        max_tokens=message.budget.max_tokens,
        route=message.route,
        allowed_tools=frozenset(message.tools) - {DEFAULT_TOOLS.answer_tool.name},
        temperature=message.temperature if message.HasField("temperature") else None,
        seed=message.seed if message.HasField("seed") else None,
    )


def _history_violations(
    history: Sequence[agent_pb2.ConversationTurn], max_query_chars: int, max_history_chars: int
) -> list[FieldViolation]:
    """Each turn's question is bounded as the query is, and all turns together by
    `max_history_chars` (a turn of 10 MB was read whole into every prompt of the run)."""
    violations: list[FieldViolation] = []
    for t, turn in enumerate(history):
        for name in ("question", "answer"):
            if not getattr(turn, name).strip():
                violations.append(FieldViolation(f"history[{t}].{name}", "must not be empty"))
        if len(turn.question) > max_query_chars:
            violations.append(
                FieldViolation(
                    f"history[{t}].question",
                    f"is {len(turn.question)} characters; max_query_chars is {max_query_chars}",
                )
            )
    total = sum(len(turn.question) + len(turn.answer) for turn in history)
    if total > max_history_chars:
        violations.append(
            FieldViolation(
                "history",
                f"has {total} characters in all; max_history_chars is {max_history_chars}",
            )
        )
    return violations


def as_run_request(
    message: agent_pb2.RunRequest | agent_pb2.StreamRunRequest,
) -> agent_pb2.RunRequest:
    """The request as the run history records it (a `RunRequest`): a `Run`'s as received, a
    `StreamRun`'s fields copied (no serialise/parse round trip; `question_windows` is a
    stream's own)."""
    if isinstance(message, agent_pb2.RunRequest):
        return message
    copied = agent_pb2.RunRequest(
        collection=message.collection,
        query=message.query,
        mode=message.mode,
        limit=message.limit,
        history=message.history,
        route=message.route,
        tools=message.tools,
    )
    for name in ("filter", "budget", "temperature", "seed"):
        if message.HasField(name):
            value = getattr(message, name)
            if isinstance(value, float | int):
                setattr(copied, name, value)
            else:
                getattr(copied, name).CopyFrom(value)
    return copied


def question_windows(
    message: agent_pb2.QuestionWindows, configured: QuestionWindows
) -> QuestionWindows:
    """A stream's own question windows: each 0 keeps the configured one, none may exceed it."""
    violations = [
        *_window_violations(
            "acknowledge_timeout_s", message.acknowledge_timeout_s, configured.acknowledge_s
        ),
        *_window_violations("answer_timeout_s", message.answer_timeout_s, configured.answer_s),
    ]
    if violations:
        raise InvalidArgument.for_violations(violations)
    return QuestionWindows(
        acknowledge_s=message.acknowledge_timeout_s or configured.acknowledge_s,
        answer_s=message.answer_timeout_s or configured.answer_s,
    )


def _window_violations(name: str, asked: float, configured: float | None) -> list[FieldViolation]:
    path = f"question_windows.{name}"
    if not math.isfinite(asked):
        return [FieldViolation(path, "must be a finite number of seconds (0: the configured)")]
    if asked < 0:
        return [FieldViolation(path, "must not be negative")]
    if configured is not None and asked > configured:
        return [FieldViolation(path, f"is {asked:g} s; the agent allows at most {configured:g} s")]
    return []


# --- results and events --------------------------------------------------------------------------


def search_result(hit: SearchHit) -> search_pb2.SearchResult:
    chunk = search_pb2.Chunk(
        id=hit.id,
        document_id=hit.document_id,
        chunk_index=hit.chunk_index,
        title=hit.title,
        text=hit.text,
        source=hit.source,
        entity_type=hit.entity_type,
        url=hit.url,
        breadcrumbs=[
            search_pb2.Breadcrumb(id=b.id, name=b.name, entity_type=b.entity_type)
            for b in hit.breadcrumbs
        ],
        metadata={k: _metadata_message(v) for k, v in hit.metadata.items()},
    )
    if hit.created_at is not None:
        chunk.created_at.FromDatetime(hit.created_at)
    if hit.updated_at is not None:
        chunk.updated_at.FromDatetime(hit.updated_at)
    result = search_pb2.SearchResult(chunk=chunk, score=hit.score)
    if hit.web is not None:
        result.web.provider = hit.web.provider
        if hit.web.fetched_at is not None:
            result.web.fetched_at.FromDatetime(hit.web.fetched_at)
    if hit.dense_score is not None:
        result.dense_score = hit.dense_score
    if hit.keyword_score is not None:
        result.keyword_score = hit.keyword_score
    return result


def _metadata_message(value: Scalar) -> search_pb2.MetadataValue:
    if isinstance(value, bool):
        return search_pb2.MetadataValue(bool_value=value)
    if isinstance(value, int):
        return search_pb2.MetadataValue(int_value=value)
    if isinstance(value, float):
        return search_pb2.MetadataValue(double_value=value)
    return search_pb2.MetadataValue(string_value=value)


def run_response(
    result: RunResult, *, full_steps: bool = False, with_steps: bool = True
) -> agent_pb2.RunResponse:
    """The final response; its step records without each call's output and results unless
    `full_steps` (what `GetRun` returns); none with `with_steps` False (the run history, which
    stores each step once, as it ends)."""
    answer = agent_pb2.Answer(
        text=result.answer.text,
        citations=[
            agent_pb2.Citation(result_id=c.result_id, title=c.title, url=c.url, web=c.web)
            for c in result.answer.citations
        ],
        confidence=result.answer.confidence,
        unanswered_parts=result.answer.unanswered,
    )
    usage = result.usage
    return agent_pb2.RunResponse(
        answer=answer,
        results=[search_result(h) for h in result.results],
        stop_reason=_STOP_REASONS[result.stop_reason],
        usage=agent_pb2.Usage(
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            cache_read_tokens=usage.cache_read_tokens,
            cache_write_tokens=usage.cache_write_tokens,
            model_calls=usage.model_calls,
            searches=usage.searches,
            tool_calls=usage.tool_calls,
            cost_usd=usage.cost_usd,
        ),
        iterations=result.iterations,
        run_id=result.run_id,
        answered_by=_answered_by(result.answered_by),
        steps=[step_message(s, full=full_steps) for s in result.steps] if with_steps else [],
        duration_ms=result.duration_ms,
    )


def step_message(step: StepRecord, *, full: bool = True) -> agent_pb2.StepRecord:
    """A step record; without its calls' output and results unless `full`."""
    message = agent_pb2.StepRecord(
        index=step.index,
        text=step.text,
        tool_calls=[_call_message(c, full=full) for c in step.tool_calls],
        input_tokens=step.usage.input_tokens,
        output_tokens=step.usage.output_tokens,
        cache_read_tokens=step.usage.cache_read_tokens,
        cache_write_tokens=step.usage.cache_write_tokens,
        answered_by=_answered_by(step.answered_by),
        started_at=_timestamp(step.started_at),
        model_ms=step.model_ms,
        duration_ms=step.duration_ms,
        offered_tools=step.offered_tools,
        compacted=step.compacted,
    )
    return message


def _call_message(call: ToolCallRecord, *, full: bool) -> agent_pb2.ToolCallRecord:
    message = agent_pb2.ToolCallRecord(
        call_id=call.call_id,
        name=call.name,
        arguments_json=call.arguments_json,
        validated_arguments_json=call.validated_arguments_json,
        started_at=_timestamp(call.started_at),
        duration_ms=call.duration_ms,
        result_ids=call.result_ids,
        error=call.error,
        total_count=call.total_count,
        previewed_ids=call.previewed_ids,
        web=any(h.web is not None for h in call.results),
    )
    if full:
        message.output = call.output
        message.results.extend(search_result(h) for h in call.results)
    return message


def _timestamp(seconds: float) -> timestamp_pb2.Timestamp:
    stamp = timestamp_pb2.Timestamp()
    stamp.FromNanoseconds(int(seconds * 1e9))
    return stamp


def _answered_by(answered_by: AnsweredBy | None) -> agent_pb2.AnsweredBy | None:
    if answered_by is None:
        return None
    return agent_pb2.AnsweredBy(
        provider=answered_by.provider,
        model=answered_by.model,
        fallback=answered_by.fallback,
        fallback_reason=answered_by.fallback_reason,
    )


def event_message(event: AgentEvent) -> agent_pb2.StreamRunResponse:
    if isinstance(event, Started):
        return agent_pb2.StreamRunResponse(
            started=agent_pb2.StartedEvent(
                run_id=event.run_id,
                collection=event.collection,
                mode=_MODE_NUMBERS[event.mode],
                route=event.route,
                step=event.step,
            )
        )
    if isinstance(event, Thinking):
        return agent_pb2.StreamRunResponse(
            thinking=agent_pb2.ThinkingEvent(
                iteration=event.iteration,
                text=event.text,
                answered_by=_answered_by(event.answered_by),
                step=event.step,
            )
        )
    if isinstance(event, ToolEvent):
        message = agent_pb2.StreamRunResponse()
        return json_format.ParseDict(
            {event.WIRE_FIELD: {**event.wire(), "step": event.step}}, message
        )
    if isinstance(event, Done):
        return agent_pb2.StreamRunResponse(
            done=agent_pb2.DoneEvent(response=run_response(event.result), step=event.step)
        )
    return agent_pb2.StreamRunResponse(error=_error(event))


def _error(event: Failed) -> agent_pb2.ErrorEvent:
    message = agent_pb2.ErrorEvent(
        code=event.code, message=event.message, retryable=event.retryable
    )
    if event.retry_after_s is not None:
        message.retry_after.FromMilliseconds(round(event.retry_after_s * 1000))
    return message
