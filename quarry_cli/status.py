"""`quarry status`: health of the three services, the gateway's routes and breakers, collections."""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from quarry.llmgateway.v1 import llm_gateway_pb2, llm_gateway_pb2_grpc
from quarry.searchtool.v1 import search_tool_pb2
from rich.console import Console

from quarry_cli.addresses import AGENT, LLM_GATEWAY, SEARCH_TOOL
from quarry_cli.connection import (
    API_KEY_ENV,
    ConnectionOptionsError,
    add_tls_arguments,
    api_key,
    channel_tls,
)
from quarry_cli.output import message_json, print_json
from services.common.auth import StaticKey
from services.common.channels import open_channel
from services.common.errors import QuarryError
from services.common.status import code_of
from services.common.tls import ChannelTls
from services.search_tool.client import SearchToolClient

EPILOG = """examples:
  quarry status
  quarry status --json
  quarry status --agent 127.0.0.1:6003   # services started on other ports
  QUARRY_API_KEY=qk-... quarry status --ca-file ca.pem   # services with TLS and auth on"""
SERVICES = (
    ("search_tool", "quarry.searchtool.v1.SearchToolService", SEARCH_TOOL),
    ("llm_gateway", "quarry.llmgateway.v1.LlmGatewayService", LLM_GATEWAY),
    ("agent", "quarry.agent.v1.AgentService", AGENT),
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    for name, _, address in SERVICES:
        flag = "--" + name.replace("_", "-")
        parser.add_argument(
            flag, default=address.address(), help=f"HOST:PORT (default {address.help()})"
        )
    parser.add_argument("--timeout", type=float, default=3.0, help="seconds per call (3)")
    parser.add_argument("--json", action="store_true", help="one JSON object")
    add_tls_arguments(parser, "the services")


def run(args: argparse.Namespace) -> int:
    try:
        tls = channel_tls(args)
    except ConnectionOptionsError as error:
        Console(stderr=True, soft_wrap=True).print(f"TLS options: {error}", markup=False)
        return 2
    return asyncio.run(_run(args, tls))


async def _run(args: argparse.Namespace, tls: ChannelTls) -> int:
    addresses = {name: getattr(args, name) for name, _, _ in SERVICES}
    health = await asyncio.gather(
        *(_health(addresses[name], service, args.timeout, tls) for name, service, _ in SERVICES)
    )
    gateway, gateway_error = await _gateway(addresses["llm_gateway"], args.timeout, tls)
    collections, collections_error = await _collections(addresses["search_tool"], args.timeout, tls)
    refused = [
        f"{name}: {code.name}"
        for name, code in (("llm_gateway", gateway_error), ("search_tool", collections_error))
        if code in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED)
    ]
    if refused:
        hint = f". Set {API_KEY_ENV} to an API key that may read." if not api_key() else ""
        Console(stderr=True).print(" · ".join(refused) + hint, markup=False)
    report: dict[str, Any] = {
        "services": [
            {"name": name, "address": addresses[name], "status": status}
            for (name, _, _), status in zip(SERVICES, health, strict=True)
        ],
        "llm_gateway": message_json(gateway) if gateway is not None else None,
        "collections": (
            message_json(search_tool_pb2.ListCollectionsResponse(collections=collections)).get(
                "collections", []
            )
            if collections is not None
            else None
        ),
    }
    if args.json:
        print_json(report)
    else:
        _print(report, gateway, collections)
    return 0 if all(status == "SERVING" for status in health) else 1


async def _health(address: str, service: str, timeout_s: float, tls: ChannelTls) -> str:
    """SERVING, NOT_SERVING (loading or draining), UNREACHABLE, or what else answers there."""
    async with open_channel(address, tls=tls) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        try:
            reply = await stub.Check(
                health_pb2.HealthCheckRequest(service=service), timeout=timeout_s
            )
        except grpc.aio.AioRpcError as error:
            if error.code() is grpc.StatusCode.NOT_FOUND:
                return "WRONG_SERVICE"
            return "UNREACHABLE"
    return str(health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status))


async def _gateway(
    address: str, timeout_s: float, tls: ChannelTls
) -> tuple[llm_gateway_pb2.GetStatusResponse | None, grpc.StatusCode | None]:
    """The gateway's routes and breakers, or the status code that refused them."""
    async with open_channel(address, tls=tls, interceptors=[StaticKey(api_key())]) as channel:
        stub = llm_gateway_pb2_grpc.LlmGatewayServiceStub(channel)
        try:
            reply: llm_gateway_pb2.GetStatusResponse = await stub.GetStatus(
                llm_gateway_pb2.GetStatusRequest(), timeout=timeout_s
            )
        except grpc.aio.AioRpcError as error:
            return None, error.code()
    return reply, None


async def _collections(
    address: str, timeout_s: float, tls: ChannelTls
) -> tuple[list[search_tool_pb2.Collection] | None, grpc.StatusCode | None]:
    """The collections this caller may see, or the status code that refused them."""
    try:
        async with SearchToolClient(
            address, timeout_s=timeout_s, api_key=api_key(), tls=tls
        ) as client:
            return await client.list_collections(), None
    except QuarryError as error:
        return None, code_of(error)


def _print(
    report: dict[str, Any],
    gateway: llm_gateway_pb2.GetStatusResponse | None,
    collections: list[search_tool_pb2.Collection] | None,
) -> None:
    console = Console(highlight=False)
    for service in report["services"]:
        colour = "green" if service["status"] == "SERVING" else "red"
        console.print(
            f"{service['name']:<12} {service['address']:<21} [{colour}]{service['status']}[/]"
        )
    if gateway is not None:
        console.print(f"routes (default {gateway.default_route}):")
        for route in gateway.routes:
            console.print(f"  {route.name}: {' → '.join(route.chain)}", markup=False)
        console.print("providers:")
        for p in gateway.providers:
            state = llm_gateway_pb2.BreakerState.Name(p.breaker_state).removeprefix(
                "BREAKER_STATE_"
            )
            console.print(
                f"  {p.name}: breaker {state.lower()}, {p.requests} requests, "
                f"{p.failures} failures",
                markup=False,
            )
    if collections is not None:
        console.print("collections:")
        for c in collections:
            building = " (building)" if c.building else ""
            console.print(
                f"  {c.name}: {c.document_count} documents, {c.chunk_count} chunks{building}",
                markup=False,
            )
