"""Test support as first-class code: fake OpenAI and Anthropic servers driven by scripts.

    Reply, ScriptedReplies    what the fake model answers, including every fault, and its file
                              (the one format of `services.llm_gateway.scripted_reply`)
    Script                    the queue of replies a fake server consumes
    FakeOpenAIServer          `POST /v1/chat/completions`, JSON and SSE
    FakeAnthropicServer       `POST /v1/messages`, JSON and SSE
    RecordedRequest           what a fake received (API keys redacted)

Names are imported lazily, so `python -m services.llm_gateway.testing.fake_openai` runs its module
once.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from services.llm_gateway.scripted_reply import (
        Reply,
        ScriptedError,
        ScriptedReplies,
        ScriptedToolCall,
        ScriptedUsage,
    )
    from services.llm_gateway.testing.fake_anthropic import FakeAnthropicServer
    from services.llm_gateway.testing.fake_openai import FakeOpenAIServer
    from services.llm_gateway.testing.fake_server import FakeServer, RecordedRequest
    from services.llm_gateway.testing.script import Script, load_script

_HOMES = {
    "FakeAnthropicServer": "services.llm_gateway.testing.fake_anthropic",
    "FakeOpenAIServer": "services.llm_gateway.testing.fake_openai",
    "FakeServer": "services.llm_gateway.testing.fake_server",
    "RecordedRequest": "services.llm_gateway.testing.fake_server",
    "Reply": "services.llm_gateway.scripted_reply",
    "Script": "services.llm_gateway.testing.script",
    "ScriptedError": "services.llm_gateway.scripted_reply",
    "ScriptedReplies": "services.llm_gateway.scripted_reply",
    "ScriptedToolCall": "services.llm_gateway.scripted_reply",
    "ScriptedUsage": "services.llm_gateway.scripted_reply",
    "load_script": "services.llm_gateway.testing.script",
}

__all__ = [
    "FakeAnthropicServer",
    "FakeOpenAIServer",
    "FakeServer",
    "RecordedRequest",
    "Reply",
    "Script",
    "ScriptedError",
    "ScriptedReplies",
    "ScriptedToolCall",
    "ScriptedUsage",
    "load_script",
]


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = importlib.import_module(_HOMES[name])
    return getattr(module, name)
