"""OpenAI chat completions, and every OpenAI-compatible endpoint through `base_url` and quirks.

Who we talk to: the SDK client (`max_retries=0`, explicit timeout: retries belong to the chain),
endpoint presets, error classification. How we speak is `translate/openai.py`.

The request goes out through the SDK client's own `post` (its documented way to call an endpoint
with a body built by the caller), not `chat.completions.create`: `create` first walks the whole
body against its TypedDicts (`async_maybe_transform`) to rename aliased keys and drop omitted ones,
and for the plain dicts, lists and strings `translate/openai.py` builds (no aliased keys, nothing
omitted) that walk returns the body unchanged, after ~2.6 ms of CPU for the agent's 14 KB turn of
`bench/gateway_latency.py` (measured at load 2.5), ten times the rest of the gateway's own work.
`post` then does everything `create` does: the same path, auth header, options, JSON, response and
stream types, and errors. The body's keys are put in `create`'s order, so the bytes on the wire are
the same (tests compare them).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx2
import openai
from openai import AsyncStream
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from services.llm_gateway.classify import classify
from services.llm_gateway.errors import ProviderError
from services.llm_gateway.model import ChatRequest, ChatResponse, Completed, StreamEvent
from services.llm_gateway.translate.openai import (
    OpenAIQuirks,
    OpenAIRequest,
    OpenAIStreamReader,
    from_completion,
    input_tokens,
    to_openai_request,
)

_PATH = "/chat/completions"
_OPTIONS: Any = {"security": {"bearer_auth": True}}
"""The request options `chat.completions.create` passes (bearer auth, client defaults)."""
_LEADING_KEYS = ("model", "stream", "messages")
"""`create` writes these keys first and every other one in alphabetical order."""

__all__ = ["ENDPOINT_PRESETS", "EndpointPreset", "OpenAIProvider", "OpenAIQuirks"]


@dataclass(frozen=True)
class EndpointPreset:
    """What is known about one OpenAI-compatible endpoint."""

    base_url: str
    api_key_env: str
    """Environment variable that conventionally holds the key."""
    quirks: OpenAIQuirks
    context_windows: Mapping[str, int] = field(default_factory=dict)
    """Context windows (tokens) of common models, as published when this table was written;
    configuration may override them."""


ENDPOINT_PRESETS: dict[str, EndpointPreset] = {
    "openai": EndpointPreset(
        base_url="https://api.openai.com/v1",
        api_key_env="OPENAI_API_KEY",
        quirks=OpenAIQuirks(strict_schemas=True, max_tokens_param="max_completion_tokens"),
        context_windows={
            "gpt-4o": 128_000,
            "gpt-4o-mini": 128_000,
            "gpt-4.1": 1_047_576,
            "gpt-4.1-mini": 1_047_576,
            "gpt-4.1-nano": 1_047_576,
            "gpt-5": 400_000,
            "gpt-5-mini": 400_000,
            "o3": 200_000,
            "o4-mini": 200_000,
        },
    ),
    "groq": EndpointPreset(
        base_url="https://api.groq.com/openai/v1",
        api_key_env="GROQ_API_KEY",
        quirks=OpenAIQuirks(
            supports_json_schema_response=False, max_tokens_param="max_completion_tokens"
        ),
        context_windows={
            "llama-3.3-70b-versatile": 131_072,
            "llama-3.1-8b-instant": 131_072,
            "openai/gpt-oss-120b": 131_072,
            "openai/gpt-oss-20b": 131_072,
            "qwen/qwen3-32b": 131_072,
            "moonshotai/kimi-k2-instruct": 131_072,
        },
    ),
    "cerebras": EndpointPreset(
        base_url="https://api.cerebras.ai/v1",
        api_key_env="CEREBRAS_API_KEY",
        quirks=OpenAIQuirks(
            strict_schemas=True, collapse_unions=True, max_tokens_param="max_completion_tokens"
        ),
        context_windows={
            "llama-3.3-70b": 65_536,
            "llama3.1-8b": 8_192,
            "qwen-3-32b": 65_536,
            "gpt-oss-120b": 131_072,
        },
    ),
    "vllm": EndpointPreset(
        base_url="http://127.0.0.1:8000/v1",
        api_key_env="VLLM_API_KEY",
        quirks=OpenAIQuirks(supports_parallel_tool_calls=False, max_tokens_param="max_tokens"),
    ),
    "ollama": EndpointPreset(
        base_url="http://127.0.0.1:11434/v1",
        api_key_env="OLLAMA_API_KEY",
        quirks=OpenAIQuirks(
            supports_parallel_tool_calls=False,
            supports_json_schema_response=False,
            max_tokens_param="max_tokens",
        ),
        context_windows={"llama3.1:8b": 131_072, "llama3.2:3b": 131_072, "qwen2.5:7b": 32_768},
    ),
    # llama-cpp-python's `python -m llama_cpp.server` (0.2.x, what `make local-model` runs): a
    # schema goes in `response_format: {type: json_object, schema}` (its `json_schema` type does
    # not exist there), `max_tokens` only, no `parallel_tool_calls`; the window is the server's
    # `--n_ctx`, so the entry sets `context_window_tokens`. Its `chatml` format keeps only the
    # first system message: the tool instruction and a turn's directive were silently dropped
    # until `one_system_message` (found by recording the requests and counting the prompt tokens
    # the server evaluated: they did not change when the instruction did).
    "llama-cpp-python": EndpointPreset(
        base_url="http://127.0.0.1:8000/v1",
        api_key_env="LLAMA_CPP_PYTHON_API_KEY",
        quirks=OpenAIQuirks(
            supports_parallel_tool_calls=False,
            supports_json_schema_response=False,
            schema_in_json_object=True,
            max_tokens_param="max_tokens",
            one_system_message=True,
        ),
    ),
    # llama.cpp's own `llama-server`: OpenAI's `json_schema` response format (it also takes the
    # json_object + schema form), `max_tokens`.
    "llama-server": EndpointPreset(
        base_url="http://127.0.0.1:8080/v1",
        api_key_env="LLAMA_SERVER_API_KEY",
        quirks=OpenAIQuirks(supports_parallel_tool_calls=False, max_tokens_param="max_tokens"),
    ),
}
"""Known OpenAI-compatible endpoints by name."""


class OpenAIProvider:
    """One model behind an OpenAI chat-completions endpoint."""

    kind = "openai"

    def __init__(
        self,
        *,
        name: str,
        model: str,
        api_key: str,
        base_url: str | None,
        context_window_tokens: int,
        default_max_output_tokens: int,
        timeout_s: float,
        quirks: OpenAIQuirks = OpenAIQuirks(),  # noqa: B008 (frozen, immutable)
        http_client: httpx2.AsyncClient | None = None,
    ) -> None:
        self._name = name
        self._model = model
        self._api_key = api_key
        self._context_window_tokens = context_window_tokens
        self._default_max_output_tokens = default_max_output_tokens
        self.quirks = quirks
        self._client = openai.AsyncOpenAI(
            api_key=api_key or "unused",
            base_url=base_url,
            max_retries=0,
            timeout=timeout_s,
            http_client=http_client,
        )

    @property
    def name(self) -> str:
        return self._name

    @property
    def model(self) -> str:
        return self._model

    @property
    def context_window_tokens(self) -> int:
        return self._context_window_tokens

    @property
    def enforces_tool_schemas(self) -> bool:
        """Tool arguments are held to their schemas: forced by JSON schema or strict schemas."""
        return self.quirks.tool_calls_by_schema or self.quirks.strict_schemas

    @property
    def forces_tool_calls(self) -> bool:
        """Every reply is a call of an offered tool: the JSON schema sent with the tools leaves the
        model no plain-text answer (`tool_calls: json_schema`)."""
        return self.quirks.tool_calls_by_schema

    def estimate_input_tokens(self, request: ChatRequest) -> int:
        """Input tokens of `request` as this endpoint receives it (the chain's window check)."""
        return input_tokens(request, self.quirks)

    async def generate(self, request: ChatRequest) -> ChatResponse:
        wire = self._wire(request)
        try:
            completion = await self._client.post(
                _PATH, cast_to=ChatCompletion, body=request_body(wire.params), options=_OPTIONS
            )
        except (openai.OpenAIError, httpx2.HTTPError) as error:
            raise self._classify(error) from None
        return from_completion(completion, wire, model=self._model)

    async def stream(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        wire = self._wire(request)
        reader = OpenAIStreamReader(wire, model=self._model, provider=self._name)
        try:
            body = request_body(
                {**wire.params, "stream": True, "stream_options": {"include_usage": True}}
            )
            chunks = await self._client.post(
                _PATH,
                cast_to=ChatCompletion,
                body=body,
                options=_OPTIONS,
                stream=True,
                stream_cls=AsyncStream[ChatCompletionChunk],
            )
            async with chunks:
                async for chunk in chunks:
                    for event in reader.feed(chunk):
                        yield event
        except (openai.OpenAIError, httpx2.HTTPError, json.JSONDecodeError) as error:
            raise self._classify(error) from None
        yield Completed(reader.finish())

    async def aclose(self) -> None:
        await self._client.close()

    def _wire(self, request: ChatRequest) -> OpenAIRequest:
        return to_openai_request(
            request,
            model=self._model,
            quirks=self.quirks,
            default_max_output_tokens=self._default_max_output_tokens,
        )

    def _classify(self, error: BaseException) -> ProviderError:
        return classify(error, provider=self._name, secrets=[self._api_key])


def request_body(params: dict[str, Any]) -> dict[str, Any]:
    """`params` (the keyword arguments of `chat.completions.create`) as the JSON body `create`
    sends: the same keys and values, in its order."""
    body = {key: params[key] for key in _LEADING_KEYS if key in params}
    for key in sorted(params.keys() - body.keys()):
        body[key] = params[key]
    return body
