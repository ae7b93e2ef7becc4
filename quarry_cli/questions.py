"""`quarry ask` answers the run's questions (`ask_user`) from the terminal.

With stdin a terminal, a `question` event is acknowledged at once (the person at the terminal sees
it, so the run waits the longer answer window) and the next line typed is sent as the answer; an
empty line asks again, end of input (Ctrl-D) skips: it answers `SKIPPED`, so the run goes on at
once instead of waiting out the answer window it was promised. Without a terminal nobody can
answer: the question is shown with a note, not acknowledged, and the run goes on without an
answer when the short acknowledge window closes. `--no-questions` keeps the model from asking.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from typing import TextIO

from quarry.agent.v1 import agent_pb2
from rich.console import Console
from rich.markup import escape

from services.agent.client import AgentClient
from services.common.errors import QuarryError

SKIPPED = "(no answer: the user skipped this question; go on with your best judgement)"
"""Sent as the answer when the user ends the input (Ctrl-D): the question was acknowledged, so
without an answer the run would wait for one until its answer window or deadline ran out."""
OUTCOMES = {
    agent_pb2.QUESTION_OUTCOME_ANSWERED: "answered",
    agent_pb2.QUESTION_OUTCOME_NOT_ACKNOWLEDGED: "no answer: not acknowledged in time",
    agent_pb2.QUESTION_OUTCOME_NOT_ANSWERED: "no answer: not answered in time",
}


class TerminalQuestions:
    """Acknowledges and answers one run's questions from `stdin`, when it is a terminal."""

    def __init__(
        self, agent: AgentClient, console: Console, *, stdin: TextIO | None = None
    ) -> None:
        self.agent = agent
        self.console = console
        self.stdin = stdin or sys.stdin
        self.interactive = self.stdin.isatty()
        self._answering: asyncio.Task[None] | None = None

    async def on_event(self, event: agent_pb2.StreamRunResponse) -> None:
        kind = event.WhichOneof("event")
        if kind == "question":
            await self._asked(event.question)
        elif kind == "question_closed":
            await self._stop_answering()

    async def close(self) -> None:
        await self._stop_answering()

    async def _asked(self, question: agent_pb2.QuestionEvent) -> None:
        if not self.interactive:
            seconds = question.acknowledge_within_ms / 1000
            self.console.print(
                f"[yellow]stdin is not a terminal, so nobody can answer: the run goes on without "
                f"an answer in {seconds:g} s[/] [dim](--no-questions keeps the model from "
                "asking)[/]"
            )
            return
        try:
            window = await self.agent.acknowledge_question(question.run_id, question.question_id)
        except QuarryError as error:
            reason = f"{error.code}: {error.message}"
            self.console.print(f"[red]cannot acknowledge the question:[/] {escape(reason)}")
            return
        within = f"within {window:g} s" if window else "before the run's deadline"
        self.console.print(
            f"[bold]your answer[/] [dim]({within}; Enter sends, Ctrl-D skips)[/]: ", end=""
        )
        self._answering = asyncio.create_task(self._answer(question))

    async def _answer(self, question: agent_pb2.QuestionEvent) -> None:
        while True:
            line = await _read_line(self.stdin)
            if line is None:
                self.console.print()
                line = SKIPPED
                break
            if line.strip():
                break
            self.console.print("[bold]your answer[/]: ", end="")
        try:
            await self.agent.answer_question(question.run_id, question.question_id, line.strip())
        except QuarryError as error:
            reason = f"{error.code}: {error.message}"
            self.console.print(f"[red]answer not taken:[/] {escape(reason)}")

    async def _stop_answering(self) -> None:
        """The question closed (or the run ended): stop waiting for a line."""
        task, self._answering = self._answering, None
        if task is None:
            return
        if not task.done():
            task.cancel()
            self.console.print()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def _read_line(stream: TextIO) -> str | None:
    """The next line of `stream` without blocking the event loop; None at end of input."""
    loop = asyncio.get_running_loop()
    ready: asyncio.Future[None] = loop.create_future()
    descriptor = stream.fileno()

    def readable() -> None:
        if not ready.done():
            ready.set_result(None)

    loop.add_reader(descriptor, readable)
    try:
        await ready
    finally:
        loop.remove_reader(descriptor)
    line = stream.readline()
    return line if line else None
