"""GenerateStructured: JSON schema in, validated JSON out.

The schema travels to the provider as `ChatRequest.response_schema` (native structured output where
the provider has it). Whatever comes back is parsed and validated here; invalid output is answered
with the validation error and asked again, at most `max_attempts` asks in all.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from services.llm_gateway.attempts import Attempt, ChainError
from services.llm_gateway.chain import ProviderChain
from services.llm_gateway.model import ChatRequest, Message, Role, Usage
from services.llm_gateway.schema_check import bounded_validator

_FENCE = re.compile(r"^```(?:json)?\s*\n?(?P<body>.*?)\n?```\s*$", re.DOTALL)


class StructuredOutputInvalid(ChainError):
    """Every ask produced output that does not satisfy the schema."""

    reason = "STRUCTURED_OUTPUT_INVALID"


@dataclass
class StructuredResult:
    """Validated JSON and what it took to get it."""

    json_text: str
    provider: str
    model: str
    usage: Usage = field(default_factory=Usage)
    """Summed over every ask."""
    attempts: list[Attempt] = field(default_factory=list)
    """Every attempt of every ask."""


@dataclass(frozen=True)
class StructuredRequest:
    messages: tuple[Message, ...]
    schema: dict[str, Any]
    schema_name: str
    max_output_tokens: int | None = None
    temperature: float | None = None
    seed: int | None = None


async def generate_structured(
    chain: ProviderChain,
    request: StructuredRequest,
    *,
    max_attempts: int,
    deadline: float | None = None,
) -> StructuredResult:
    """Ask until the reply validates against the schema, at most `max_attempts` times."""
    validator = bounded_validator(request.schema)
    messages = request.messages
    usage = Usage()
    attempts: list[Attempt] = []
    problem = ""
    for _ in range(max_attempts):
        chat = ChatRequest(
            messages=messages,
            max_output_tokens=request.max_output_tokens,
            temperature=request.temperature,
            seed=request.seed,
            response_schema=request.schema,
            response_schema_name=request.schema_name,
        )
        try:
            routed = await chain.generate(chat, deadline=deadline)
        except ChainError as error:
            error.attempts = attempts + error.attempts
            raise
        usage.add(routed.response.usage)
        attempts.extend(routed.attempts)
        text = routed.response.text
        value, problem = _check(text, validator)
        if not problem:
            return StructuredResult(
                json_text=json.dumps(value, ensure_ascii=False),
                provider=routed.provider,
                model=routed.response.model,
                usage=usage,
                attempts=attempts,
            )
        messages = (*messages, Message(Role.ASSISTANT, text=text), _correction(problem))
    raise StructuredOutputInvalid(
        f"no reply satisfied the schema after {max_attempts} asks; last problem: {problem}",
        attempts,
    )


def _check(text: str, validator: Any) -> tuple[Any, str]:
    """The parsed value and an empty string, or None and what is wrong."""
    fenced = _FENCE.match(text.strip())
    body = fenced.group("body") if fenced else text
    try:
        value = json.loads(body)
    except json.JSONDecodeError as error:
        return None, f"the reply is not valid JSON ({error.msg} at position {error.pos})"
    errors = sorted(validator.iter_errors(value), key=lambda e: list(e.absolute_path))
    if errors:
        first = errors[0]
        where = "/".join(str(p) for p in first.absolute_path) or "(root)"
        return None, f"the reply does not satisfy the schema at {where}: {first.message}"
    return value, ""


def _correction(problem: str) -> Message:
    return Message(
        Role.USER,
        text=(
            f"Your previous reply was rejected: {problem}. Reply again with only a JSON value "
            "that satisfies the requested schema."
        ),
    )
