"""The registry: the tools the agent has, the ones a run's allowlist offers, a call's tool by
name. `DEFAULT_TOOLS` is the agent's: the `TOOL` of every module of this package, so adding a
tool is adding its module."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterable, Iterator

from services.agent.ports import ToolChoice
from services.agent.tools.base import Tool


class ToolRegistry:
    """Tools by name, in the order they are offered (standard, then opt-in, then always)."""

    def __init__(self, tools: Iterable[Tool]) -> None:
        order = {"standard": 0, "opt_in": 1, "always": 2}
        ranked = sorted(tools, key=lambda t: (order[t.offer], t.position, t.name))
        self._tools = {t.name: t for t in ranked}
        if len(self._tools) != len(ranked):
            raise ValueError("two tools of a registry share a name")
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

    def turn(
        self, offered: tuple[Tool, ...], *, opening_forced: bool, deliberate: bool = False
    ) -> tuple[tuple[Tool, ...], ToolChoice]:
        """What a search-phase turn offers: every tool of the run, the model choosing. Except
        the opening turn on a route whose replies are forced tool calls (`opening_forced`),
        where the model must call one of the tools offered and, given `submit_answer`,
        Qwen2.5-Coder-1.5B answered from memory on its first turn in 6 of 8 FAST runs over the
        Python docs (citing nothing it had read), and in 2 of 6 THINKING runs on the demo
        question set:
        * a FAST run gets the tool that `opens` (search) alone, named: it searches first;
        * a THINKING run (`deliberate`) gets every tool of the run but the answering one, so it
          may plan, count, calculate or search first, but looks before it answers.
        A run offered no other tool is offered what it has."""
        if opening_forced and deliberate:
            looking = tuple(tool for tool in offered if not tool.answers)
            if looking:
                return looking, ToolChoice("required")
        elif opening_forced:
            for tool in offered:
                if tool.opens:
                    return (tool,), ToolChoice("named", tool.name)
        return offered, ToolChoice()


def package_tools(package: str = "services.agent.tools") -> list[Tool]:
    """The `TOOL` of every module of `package` (`tools/<name>.py`)."""
    found: list[Tool] = []
    for info in pkgutil.iter_modules(importlib.import_module(package).__path__):
        tool = getattr(importlib.import_module(f"{package}.{info.name}"), "TOOL", None)
        if isinstance(tool, Tool):
            found.append(tool)
    return found


DEFAULT_TOOLS = ToolRegistry(package_tools())
"""The agent's tools: every tool module's `TOOL`."""
