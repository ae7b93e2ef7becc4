"""Span, attribute and metric names of the OpenTelemetry GenAI conventions, in one place."""

from __future__ import annotations

# Span names
INVOKE_AGENT = "invoke_agent"
EXECUTE_TOOL = "execute_tool"  # followed by the tool name: `execute_tool search`
CHAT = "chat"  # followed by the model: `chat gpt-4o-mini`
EMBEDDINGS = "embeddings"

# Attributes
GEN_AI_OPERATION_NAME = "gen_ai.operation.name"
GEN_AI_PROVIDER_NAME = "gen_ai.provider.name"
GEN_AI_REQUEST_MODEL = "gen_ai.request.model"
GEN_AI_RESPONSE_MODEL = "gen_ai.response.model"
GEN_AI_REQUEST_MAX_TOKENS = "gen_ai.request.max_tokens"
GEN_AI_REQUEST_TEMPERATURE = "gen_ai.request.temperature"
GEN_AI_REQUEST_SEED = "gen_ai.request.seed"
GEN_AI_RESPONSE_FINISH_REASONS = "gen_ai.response.finish_reasons"
GEN_AI_USAGE_INPUT_TOKENS = "gen_ai.usage.input_tokens"
GEN_AI_USAGE_OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS = "gen_ai.usage.cache_read.input_tokens"
GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS = "gen_ai.usage.cache_creation.input_tokens"
GEN_AI_TOKEN_TYPE = "gen_ai.token.type"
GEN_AI_AGENT_NAME = "gen_ai.agent.name"
GEN_AI_CONVERSATION_ID = "gen_ai.conversation.id"
GEN_AI_TOOL_NAME = "gen_ai.tool.name"
GEN_AI_TOOL_CALL_ID = "gen_ai.tool.call.id"
GEN_AI_TOOL_TYPE = "gen_ai.tool.type"
GEN_AI_DATA_SOURCE_ID = "gen_ai.data_source.id"
ERROR_TYPE = "error.type"

# Operation names
OP_CHAT = "chat"
OP_INVOKE_AGENT = "invoke_agent"
OP_EXECUTE_TOOL = "execute_tool"
OP_EMBEDDINGS = "embeddings"
OP_GENERATE_CONTENT = "generate_content"

# Metrics
METRIC_OPERATION_DURATION = "gen_ai.client.operation.duration"
METRIC_TOKEN_USAGE = "gen_ai.client.token.usage"

# Quarry's own attributes (no GenAI convention covers them)
QUARRY_AGENT_STEP = "quarry.agent.step"
"""The step (model turn, from 1) a span belongs to: the index of its step record and events."""
QUARRY_AGENT_STEPS = "quarry.agent.steps"
"""Steps a run took (on `invoke_agent`)."""
