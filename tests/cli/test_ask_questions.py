"""`quarry ask` and the model's questions: answered from a terminal, left to expire without one,
not offered with --no-questions. The command runs as a subprocess against an agent on port 0 (the
scripted model, the in-memory search tool); its stdin is a pipe or a pseudo-terminal."""

from __future__ import annotations

import asyncio
import os
import pty
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import grpc
import pytest
from quarry.agent.v1 import agent_pb2_grpc

from quarry_cli.cli import ask
from services.agent.config import AgentSettings, QuestionSettings
from services.agent.loop import AgentLoop
from services.agent.messages import Role
from services.agent.server import SERVICE_NAME
from services.agent.servicer import AgentServicer
from services.agent.testing import ScriptedModel, answer_call, ask_call, search_call, turn
from services.common.server import QuarryServer, ServiceRegistration, build_server
from services.common.settings import ServerSettings
from tests.agent.conftest import DOCUMENTS
from tests.agent.fake_search import FakeSearch
from tests.cli.test_cli import _args


def _asking_model() -> ScriptedModel:
    return ScriptedModel(
        [
            turn("Ambiguous.", ask_call("Which Python version?")),
            turn("", search_call("temporary directory")),
            turn("", answer_call("Use TemporaryDirectory [1].", ["tempfile__chunk_0"])),
        ]
    )


@asynccontextmanager
async def _agent(model: ScriptedModel, questions: QuestionSettings) -> AsyncIterator[str]:
    settings = AgentSettings(server=ServerSettings(port=0, grace_s=0), questions=questions)
    search = FakeSearch(DOCUMENTS, collection="python-docs")
    servicer = AgentServicer(AgentLoop(model, search), settings)

    def register(server: grpc.aio.Server) -> None:
        agent_pb2_grpc.add_AgentServiceServicer_to_server(servicer, server)

    server: QuarryServer = build_server(
        [ServiceRegistration(SERVICE_NAME, register)], settings.server
    )
    await server.start()
    try:
        yield server.address
    finally:
        await server.stop(0)


def _ask_command(address: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "quarry_cli.cli",
        "ask",
        "temporary directory",
        "--collection",
        "python-docs",
        "--mode",
        "thinking",
        "--address",
        address,
        "--timeout",
        "60",
    ]


def _tool_results(model: ScriptedModel, call: int) -> list[str]:
    return [m.text for m in model.requests[call].messages if m.role is Role.TOOL]


async def test_without_a_terminal_ask_says_so_and_the_run_goes_on_without_an_answer() -> None:
    model = _asking_model()
    async with _agent(model, QuestionSettings(acknowledge_timeout_s=0.2)) as address:
        process = await asyncio.create_subprocess_exec(
            *_ask_command(address),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(process.communicate(b"3.12\n"), 120)

    text = out.decode()
    assert process.returncode == 0, err.decode()
    assert "question Which Python version?" in text
    assert "stdin is not a terminal, so nobody can answer" in text
    assert "question no answer: not acknowledged in time" in text
    assert "Use TemporaryDirectory [1]." in text
    [tool_result] = _tool_results(model, 1)
    assert tool_result.startswith("No answer: the caller did not respond")


async def test_in_a_terminal_ask_acknowledges_prompts_and_sends_the_typed_answer() -> None:
    model = _asking_model()
    controller, terminal = pty.openpty()
    # a long acknowledge window: only the answer's arrival may end this wait
    questions = QuestionSettings(acknowledge_timeout_s=600, answer_timeout_s=600)
    try:
        async with _agent(model, questions) as address:
            process = await asyncio.create_subprocess_exec(
                *_ask_command(address),
                stdin=terminal,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
            assert process.stdout is not None
            lines = []
            async with asyncio.timeout(120):
                while line := (await process.stdout.readline()).decode():
                    lines.append(line)
                    if line.startswith("question Which Python version?"):
                        os.write(controller, b"\n3.12\n")  # an empty line asks again
                await process.wait()
    finally:
        os.close(controller)
        os.close(terminal)

    text = "".join(lines)
    assert process.returncode == 0, text
    assert "your answer" in text
    assert "question answered 3.12" in text
    assert "Use TemporaryDirectory [1]." in text
    assert _tool_results(model, 1) == ["The caller answered: 3.12"]


async def test_no_questions_keeps_ask_user_from_the_model(
    capsys: pytest.CaptureFixture[str],
) -> None:
    model = ScriptedModel([turn("", answer_call("Nothing to ask."))])
    async with _agent(model, QuestionSettings()) as address:
        assert await ask(_args(address, no_questions=True)) == 0
    assert "ask_user" not in [t.name for t in model.requests[0].tools]


async def _ask_in_terminal(address: str) -> tuple[asyncio.subprocess.Process, int, int]:
    """`quarry ask` with a pseudo-terminal as stdin: (process, controller, terminal)."""
    controller, terminal = pty.openpty()
    process = await asyncio.create_subprocess_exec(
        *_ask_command(address),
        stdin=terminal,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    return process, controller, terminal


async def _lines_until(process: asyncio.subprocess.Process, prefix: str) -> list[str]:
    assert process.stdout is not None
    lines = []
    while line := (await process.stdout.readline()).decode():
        lines.append(line)
        if line.startswith(prefix):
            return lines
    raise AssertionError(f"{prefix!r} never printed: {''.join(lines)}")


async def test_ctrl_d_at_the_prompt_skips_the_question_and_the_run_goes_on_at_once() -> None:
    model = _asking_model()
    # windows far longer than the test: only the skip itself may let the run go on
    questions = QuestionSettings(acknowledge_timeout_s=600, answer_timeout_s=600)
    async with _agent(model, questions) as address:
        process, controller, terminal = await _ask_in_terminal(address)
        try:
            async with asyncio.timeout(60):
                lines = await _lines_until(process, "question Which Python version?")
                os.write(controller, b"\x04")  # Ctrl-D on an empty line: end of input
                assert process.stdout is not None
                lines.append((await process.stdout.read()).decode())
                await process.wait()
        finally:
            os.close(controller)
            os.close(terminal)
    text = "".join(lines)
    assert process.returncode == 0, text
    assert "question skipped" in text
    assert "Use TemporaryDirectory [1]." in text
    [tool_result] = _tool_results(model, 1)
    assert "skipped this question" in tool_result


async def test_ctrl_c_during_ask_prints_one_line_and_no_traceback() -> None:
    model = _asking_model()
    questions = QuestionSettings(acknowledge_timeout_s=600, answer_timeout_s=600)
    async with _agent(model, questions) as address:
        process, controller, terminal = await _ask_in_terminal(address)
        try:
            async with asyncio.timeout(60):
                await _lines_until(process, "question Which Python version?")
                process.send_signal(signal.SIGINT)
                assert process.stdout is not None
                rest = (await process.stdout.read()).decode()
                await process.wait()
        finally:
            os.close(controller)
            os.close(terminal)
    assert process.returncode == 130, rest
    assert "Traceback" not in rest
    assert rest.strip().splitlines()[-1] == "quarry: interrupted"
