"""Test support as first-class code: fake OpenAI and Anthropic servers driven by scripts.

    Script / Reply            what the fake model answers, including every fault
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
    from services.llm_gateway.testing.fake_anthropic import FakeAnthropicServer
    from services.llm_gateway.testing.fake_openai import FakeOpenAIServer
    from services.llm_gateway.testing.fake_server import FakeServer, RecordedRequest
    from services.llm_gateway.testing.script import (
        Reply,
        Script,
        ScriptedError,
        ScriptedToolCall,
        ScriptedUsage,
        load_script,
    )

_HOMES = {
    "FakeAnthropicServer": "fake_anthropic",
    "FakeOpenAIServer": "fake_openai",
    "FakeServer": "fake_server",
    "RecordedRequest": "fake_server",
    "Reply": "script",
    "Script": "script",
    "ScriptedError": "script",
    "ScriptedToolCall": "script",
    "ScriptedUsage": "script",
    "load_script": "script",
}

__all__ = [
    "FakeAnthropicServer",
    "FakeOpenAIServer",
    "FakeServer",
    "RecordedRequest",
    "Reply",
    "Script",
    "ScriptedError",
    "ScriptedToolCall",
    "ScriptedUsage",
    "load_script",
]


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = importlib.import_module(f"{__name__}.{_HOMES[name]}")
    return getattr(module, name)
