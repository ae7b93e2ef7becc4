"""Bootstrap of the agent service: channels to its two dependencies, the loop, the gRPC server."""

from __future__ import annotations

import sqlite3

import grpc
from opentelemetry import metrics
from quarry.agent.v1 import agent_pb2, agent_pb2_grpc

from services.agent.config import AgentSettings, HistorySettings
from services.agent.gateway_client import GatewayModelClient
from services.agent.history import RunStore
from services.agent.history_postgres import PostgresRunHistory
from services.agent.loop import AgentLoop
from services.agent.questions_postgres import PostgresQuestionBoard
from services.agent.run_history import RunHistory
from services.agent.search_tool_client import SearchToolClient
from services.agent.servicer import AgentServicer
from services.common.auth import AUTHENTICATED, Access, ForwardCallerKey, MethodRule, StaticKey
from services.common.channels import open_channel
from services.common.server import QuarryServer, ServiceRegistration, build_server
from services.common.telemetry import Telemetry

SERVICE_NAME = agent_pb2.DESCRIPTOR.services_by_name["AgentService"].full_name
AGENT_NAME = "quarry-agent"


def build_agent_server(settings: AgentSettings, telemetry: Telemetry | None = None) -> QuarryServer:
    """The agent's server, bound but not started; its channels close when it stops."""
    meter = telemetry.meter("services.agent") if telemetry else None
    store = open_history(settings.history, meter=meter)
    gateway = open_channel(
        settings.llm_gateway_address,
        telemetry,
        interceptors=[StaticKey(settings.gateway_api_key())],
        tls=settings.llm_gateway_tls,
        load_balancing=settings.load_balancing,
    )
    search = open_channel(
        settings.search_tool_address,
        telemetry,
        interceptors=[ForwardCallerKey()],
        tls=settings.search_tool_tls,
        load_balancing=settings.load_balancing,
    )
    loop = AgentLoop(
        GatewayModelClient(gateway),
        SearchToolClient(search),
        settings=settings.loop,
        default_route=settings.route,
        context_window_tokens=settings.context_window_tokens,
        tracer=telemetry.tracer("services.agent") if telemetry else None,
        agent_name=AGENT_NAME,
    )
    board = None
    if isinstance(store, PostgresRunHistory):  # questions go where the runs are: every replica
        board = PostgresQuestionBoard(store, settings.questions)
        board.start()
    servicer = AgentServicer(loop, settings, store, board)

    def register(server: grpc.aio.Server) -> None:
        agent_pb2_grpc.add_AgentServiceServicer_to_server(servicer, server)

    server = build_server(
        [ServiceRegistration(SERVICE_NAME, register, access_rules(settings))],
        settings.server,
        telemetry,
    )

    async def close_channels() -> None:
        await gateway.close(None)
        await search.close(None)
        if board is not None:
            await board.close()
        if store is not None:
            await store.close()

    server.on_grace_end.append(servicer.cut_runs)
    server.on_stop.append(close_channels)
    return server


def open_history(
    settings: HistorySettings, *, meter: metrics.Meter | None = None
) -> RunHistory | None:
    """The configured run history, open (None when it is off). SQLite that cannot be opened
    stops the start (OSError naming the file); PostgreSQL opens without waiting for the database
    (runs go on unrecorded while it is down)."""
    if not settings.enabled:
        return None
    if settings.kind == "postgres":
        postgres = PostgresRunHistory(settings)
        postgres.open()
        return postgres
    store = RunStore(settings, meter=meter)
    try:
        store.open()
    except (OSError, sqlite3.Error) as error:
        raise OSError(f"run history at {settings.path}: {error}") from error
    return store


def access_rules(settings: AgentSettings) -> dict[str, MethodRule]:
    """A run reads its collection (the request's, else the configured default): the caller's
    key must grant it here, and the search tool checks the same key again. Answering or
    acknowledging a question needs a key; the servicer then checks it is the run's own."""

    def collection(request: agent_pb2.RunRequest | agent_pb2.StreamRunRequest) -> str:
        return request.collection or settings.default_collection

    rule = MethodRule(Access.READ, collection)
    return {
        "Run": rule,
        "StreamRun": rule,
        "AnswerQuestion": AUTHENTICATED,
        "AcknowledgeQuestion": AUTHENTICATED,
        "GetRun": AUTHENTICATED,
        "ListRuns": AUTHENTICATED,
    }
