"""The registry: the tools the agent has, the ones a run's allowlist offers, a call's tool by
name. `DEFAULT_TOOLS` is the agent's; adding a tool is one entry here after its module."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from services.agent.tools.ask_user import AskUserTool
from services.agent.tools.base import Tool
from services.agent.tools.calculate import CalculateTool
from services.agent.tools.count import CountTool
from services.agent.tools.read import ReadTool
from services.agent.tools.search import SearchTool
from services.agent.tools.submit_answer import SubmitAnswerTool
from services.agent.tools.summarize import SummarizeTool
from services.agent.tools.web_search import WebSearchTool


class ToolRegistry:
    """Tools by name, in the order they are offered (standard, then opt-in, then always)."""

    def __init__(self, tools: Iterable[Tool]) -> None:
        order = {"standard": 0, "opt_in": 1, "always": 2}
        self._tools = {t.name: t for t in sorted(tools, key=lambda t: order[t.offer])}
        answering = [t for t in self._tools.values() if t.answers]
        if len(answering) != 1 or answering[0].offer != "always":
            raise ValueError("a registry needs exactly one answering tool, always offered")
        self.answer_tool = answering[0]
        """The tool that submits the final answer (the answer-only call offers it alone)."""

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def __iter__(self) -> Iterator[Tool]:
        return iter(self._tools.values())

    @property
    def names(self) -> tuple[str, ...]:
        """Every name a request's tool list may hold, in offer order."""
        return tuple(self._tools)

    @property
    def default_names(self) -> tuple[str, ...]:
        """The tools of a run whose request names none."""
        return tuple(t.name for t in self._tools.values() if t.offer != "opt_in")

    def offered(self, allowed: frozenset[str]) -> tuple[Tool, ...]:
        """The tools of a run: the standard tools allowed (all when `allowed` names none of
        them), the opt-in tools named, then the tools always offered."""
        standard = {t.name for t in self._tools.values() if t.offer == "standard"}
        any_standard = bool(allowed & standard)
        return tuple(
            t
            for t in self._tools.values()
            if (t.offer == "standard" and (not any_standard or t.name in allowed))
            or (t.offer == "opt_in" and t.name in allowed)
            or t.offer == "always"
        )


DEFAULT_TOOLS = ToolRegistry(
    [
        SearchTool(),
        ReadTool(),
        CountTool(),
        CalculateTool(),
        AskUserTool(),
        WebSearchTool(),
        SummarizeTool(),
        SubmitAnswerTool(),
    ]
)
"""The agent's tools."""
