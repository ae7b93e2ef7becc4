"""Test support as first-class code: fake OpenAI and Anthropic servers driven by scripts.

Script / Reply            what the fake model answers, including every fault
FakeOpenAIServer          `POST /v1/chat/completions`, JSON and SSE
FakeAnthropicServer       `POST /v1/messages`, JSON and SSE
RecordedRequest           what a fake received (API keys redacted)
"""

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
