"""The system prompt (package resources, identical for every run with the same tool allowlist so
providers can cache it) and the dynamic first user message, in the format of
`docs/agent-tool-contract.md`."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from functools import cache
from importlib import resources

from services.agent.filters import NO_VALUE, CallerFilter
from services.agent.run import Mode
from services.agent.search import CollectionInfo, Facet, keyword_language_line
from services.agent.tools import DEFAULT_TOOLS, Tool

MODE_INSTRUCTIONS = {
    Mode.FAST: "FAST — perform exactly ONE search, then immediately call submit_answer.",
    Mode.THINKING: "THINKING — search as often as needed, then call submit_answer.",
}
FORCE_ANSWER = (
    "You must now call submit_answer with the best answer you can compose from what you've found "
    "so far. If no direct answer was found, say so honestly."
)
SUMMARY_HEADING = "## Previous search history summary"


@cache
def system_prompt(tools: tuple[Tool, ...] | None = None) -> str:
    """The system prompt for a run offering `tools` (in offer order; None: the default tools):
    the tool list (each tool's `prompt_line`) and each tool's guidance follow the allowlist."""
    offered = DEFAULT_TOOLS.offered(frozenset()) if tools is None else tools
    template = _resource("agent_task.md")
    guidance = "".join(tool.guidance for tool in offered)
    return template.replace("{{tool_list}}", "\n".join(t.prompt_line for t in offered)).replace(
        "{{tool_guidance}}", guidance
    )


def _resource(name: str) -> str:
    return resources.files("services.agent.prompts").joinpath(name).read_text("utf-8")


def task_message(
    query: str,
    mode: Mode,
    caller_filter: CallerFilter,
    collection: CollectionInfo,
    *,
    summary: str = "",
) -> str:
    """The first user message: query, mode, caller filter, collection (and a summary, if any)."""
    sections = [
        f"## Query\n{query}",
        f"## Mode\n{MODE_INSTRUCTIONS[mode]}",
        f"## Caller filter\n{_filter_text(caller_filter)}",
        f"## Collection\n{describe_collection(collection)}",
    ]
    if summary:
        sections.append(f"{SUMMARY_HEADING}\n{summary}")
    return "\n\n".join(sections) + "\n"


def _filter_text(caller_filter: CallerFilter) -> str:
    """The caller's filter in the shape of the model's own `filter_groups`."""
    if not caller_filter.groups:
        return "none"
    groups = [
        {
            "conditions": [
                {
                    "field": c.field,
                    "operator": c.operator,
                    "value": None if c.value is NO_VALUE else _plain(c.value),
                }
                for c in group
            ]
        }
        for group in caller_filter.groups
    ]
    return json.dumps(groups)


def _plain(value: object) -> object:
    """JSON numbers arrive as floats; show `2024`, not `2024.0`."""
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def describe_collection(info: CollectionInfo) -> str:
    lines = [
        f"name: {info.name}",
        f"documents: {info.document_count}; chunks: {info.chunk_count}",
        f"sources: {_facets(info.sources)}",
        f"entity types: {_facets(info.entity_types)}",
        "filterable fields: " + (", ".join(f"{n} ({t})" for n, t in info.fields) or "none"),
    ]
    if info.earliest_created_at and info.latest_created_at:
        earliest, latest = _date(info.earliest_created_at), _date(info.latest_created_at)
        lines.append(f"created_at range: {earliest} to {latest}")
    if language := keyword_language_line(info.keyword_language):
        lines.append(language)
    return "\n".join(lines)


def _facets(facets: Sequence[Facet]) -> str:
    return ", ".join(f"{f.value} ({f.count})" for f in facets) or "none"


def _date(value: datetime) -> str:
    return value.isoformat().replace("+00:00", "Z")
