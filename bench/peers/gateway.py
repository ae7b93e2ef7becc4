"""Quarry's LLM gateway against LiteLLM, interleaved in one run: the latency each adds over the
direct SDK call to the same local fake OpenAI server.

    pip install -e '.[dev,peers]'
    python bench/peers/gateway.py [--requests N] [--out bench/results/peers_gateway.json]

Three paths to one fake OpenAI server (`services.llm_gateway.testing.fake_openai`, a subprocess):
the OpenAI SDK directly; Quarry's gateway (a subprocess) through gRPC `Generate`; LiteLLM's
`Router.acompletion` in process (the way a Python application embeds it). Two requests: a bare
one-question request and the agent-shaped one of `bench/gateway_latency.py` (the agent's two tool
schemas and a ten-message conversation of searches and their results). Every iteration calls the
three paths back to back, the order rotating, so the machine's drift hits all alike.

Added latency = p50 through the path - p50 direct; ratio = Quarry's added / LiteLLM's added (below
1: Quarry adds less; at or below 0: Quarry's path is no slower than the direct SDK call, which
happens on the agent-shaped request: the gateway posts the body through the SDK client without
`chat.completions.create`'s walk of the parameters (~2.6 ms CPU), which the direct call and LiteLLM
pay). The ratio is left out (null) only when LiteLLM's added p50 is not positive. Note that
Quarry's path includes a gRPC hop to another process and LiteLLM's does not; LiteLLM's proxy server
(the like-for-like comparison) is not measured: `litellm[proxy]` pins `rich==13.9.4` against the
product's `rich==15.0.0`, so it cannot be installed beside Quarry from one pinned `pyproject.toml`.

Prints one JSON object. Exits 2 when the peer is not installed.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

# LiteLLM fetches its model price map from the network at import unless told not to.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
try:
    import litellm
except ImportError as missing:  # the peer is an optional extra
    print(f'{{"error": "peer not installed: {missing.name}; pip install -e .[peers]"}}')
    raise SystemExit(2) from None

import grpc
import openai
from quarry.llmgateway.v1 import llm_gateway_pb2 as pb
from quarry.llmgateway.v1 import llm_gateway_pb2_grpc as pb_grpc

from bench.gateway_latency import (
    MESSAGES,
    agent_conversation,
    agent_request,
    agent_sdk_tools,
)
from bench.gateway_processes import BENCH_KEY, MODEL, fake_and_gateway
from bench.harness import RESULTS_DIR, emit, machine, percentile

WARMUP = 20
PATHS = ("direct", "quarry", "litellm")

Call = Callable[[], Awaitable[Any]]


async def interleaved(calls: dict[str, Call], count: int) -> dict[str, list[float]]:
    """`count` timed calls of each path, one of each per iteration, the order rotating."""
    names = list(calls)
    for _ in range(WARMUP):
        for name in names:
            await calls[name]()
    samples: dict[str, list[float]] = {name: [] for name in names}
    for n in range(count):
        shift = n % len(names)
        for name in names[shift:] + names[:shift]:
            started = time.perf_counter()
            await calls[name]()
            samples[name].append((time.perf_counter() - started) * 1000)
    return samples


def compare(samples: dict[str, list[float]]) -> dict[str, Any]:
    p50 = {name: percentile(times, 50) for name, times in samples.items()}
    p95 = {name: percentile(times, 95) for name, times in samples.items()}
    quarry_added = p50["quarry"] - p50["direct"]
    litellm_added = p50["litellm"] - p50["direct"]
    return {
        **{f"{name}_p50_ms": round(p50[name], 3) for name in samples},
        **{f"{name}_p95_ms": round(p95[name], 3) for name in samples},
        "quarry_added_p50_ms": round(quarry_added, 3),
        "litellm_added_p50_ms": round(litellm_added, 3),
        # below 1: Quarry adds less (≤ 0: Quarry is no slower than the direct call); None when
        # LiteLLM's added p50 is not positive (no ratio to take)
        "ratio_quarry_to_litellm_added": (
            round(quarry_added / litellm_added, 3) if litellm_added > 0 else None
        ),
        "ratio_quarry_to_litellm_p50": round(p50["quarry"] / p50["litellm"], 3),
    }


async def run(requests: int) -> dict[str, Any]:
    litellm.telemetry = False
    with fake_and_gateway() as processes:
        sdk = openai.AsyncOpenAI(
            api_key=BENCH_KEY, base_url=processes.fake_base_url, max_retries=0, timeout=30
        )
        router = litellm.Router(
            model_list=[
                {
                    "model_name": MODEL,
                    "litellm_params": {
                        "model": f"openai/{MODEL}",
                        "api_base": processes.fake_base_url,
                        "api_key": BENCH_KEY,
                        "timeout": 30,
                    },
                }
            ],
            num_retries=0,
        )
        channel = grpc.aio.insecure_channel(processes.gateway_address)
        stub = pb_grpc.LlmGatewayServiceStub(channel)
        bare = pb.GenerateRequest(
            messages=[pb.Message(role=pb.ROLE_USER, text=MESSAGES[0]["content"])]
        )
        agent = agent_request()
        agent_messages = agent_conversation()
        tools = agent_sdk_tools()

        async def check(reply: Any) -> None:
            assert reply.choices[0].message.content, "the fake server's reply is missing"

        bare_calls: dict[str, Call] = {
            "direct": lambda: sdk.chat.completions.create(model=MODEL, messages=MESSAGES),  # type: ignore[arg-type]
            "quarry": lambda: stub.Generate(bare),
            "litellm": lambda: router.acompletion(model=MODEL, messages=MESSAGES),
        }
        agent_calls: dict[str, Call] = {
            "direct": lambda: sdk.chat.completions.create(
                model=MODEL,
                messages=agent_messages,  # type: ignore[arg-type]
                tools=tools,  # type: ignore[arg-type]
            ),
            "quarry": lambda: stub.Generate(agent),
            "litellm": lambda: router.acompletion(
                model=MODEL, messages=agent_messages, tools=tools
            ),
        }
        await check(await bare_calls["litellm"]())
        await check(await agent_calls["direct"]())
        bare_samples = await interleaved(bare_calls, requests)
        agent_samples = await interleaved(agent_calls, requests)
        await channel.close(None)
        await sdk.close()
    return {
        "benchmark": "peers_gateway",
        "peer": f"litellm {litellm_version()} Router, in process",
        "requests_per_path": requests,
        "bare": compare(bare_samples),
        "agent_shaped": compare(agent_samples),
        "not_measured": "LiteLLM proxy: litellm[proxy] pins rich==13.9.4 against the product's "
        "rich==15.0.0",
        "machine": machine(),
    }


def litellm_version() -> str:
    from importlib.metadata import version

    return version("litellm")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--out", type=Path, default=RESULTS_DIR / "peers_gateway.json")
    args = parser.parse_args()
    if args.requests < 1:
        parser.error("--requests must be at least 1")
    emit(asyncio.run(run(args.requests)), args.out)


if __name__ == "__main__":
    main()
