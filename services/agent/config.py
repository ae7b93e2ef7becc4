"""Typed settings of the agent service (YAML section `agent`, env prefix `QUARRY_AGENT_`)."""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import ClassVar, Literal

from pydantic import BaseModel, Field, model_validator
from pydantic_settings import SettingsConfigDict

from services.common.postgres import PostgresSettings
from services.common.settings import QuarrySettings, ServerSettings
from services.common.tls import ChannelTls

DEFAULT_PORT = 50053
DEFAULT_MAX_CONCURRENT_RUNS = 16
"""Runs (Run and StreamRun) the agent takes on at once by default (chosen with `bench/load_e2e.py`:
the same goodput as 32 at half the latency on 2 cores); each holds a model call or a
search most of its life, so this bounds the load the agent puts on its two dependencies."""
DEFAULT_OVERLOAD_RETRY_AFTER_S = 4.0
"""The RetryInfo delay of a run refused over the bound. A run lasts about 0.3–0.5 s, but once the
bound is reached it stays reached while callers keep coming, so a retry after 1 s is mostly
refused again: at 500 callers on 2 cores, 1 s made callers retry ~140 times a second and lowered
goodput to 85 % of peak; 4 s kept it at 97 % with no loss at 50 callers (`bench/load_e2e.py`)."""


class AgentServerSettings(ServerSettings):
    """`ServerSettings` with this service's port, admission bound and refusal delay as defaults
    (also when the YAML `server` section sets only some keys)."""

    port: int = Field(default=DEFAULT_PORT, ge=0, le=65535)
    max_concurrent_rpcs: int | None = Field(default=DEFAULT_MAX_CONCURRENT_RUNS, ge=1)
    overload_retry_after_s: float = Field(default=DEFAULT_OVERLOAD_RETRY_AFTER_S, gt=0)


class LoopSettings(BaseModel):
    """Caps and context-management knobs of the run loop."""

    thinking_max_iterations: int = Field(default=20, ge=1, le=100)
    """Safety cap on searches in THINKING mode."""
    fast_max_iterations: int = Field(default=1, ge=1, le=5)
    """Hard cap on searches in FAST mode."""
    parallel_searches: int = Field(default=4, ge=1, le=16)
    """THINKING: consecutive searches of one turn run concurrently, at most this many at once."""
    preview_chars: int = Field(default=500, ge=0)
    """Goal-aware context: while searching, result texts longer than this are shown as previews;
    the results the model is about to cite are given in full before it answers. 0: always full."""
    refinement_rounds: int = Field(default=1, ge=0, le=3)
    """THINKING: how often an answer below `refine_below` confidence is sent back for one more
    round of searching while the cap and budget allow (0 turns self-evaluation off)."""
    refine_below: float = Field(default=0.5, ge=0, le=1)
    """THINKING: answers with a lower self-reported confidence get a refinement round."""
    default_limit: int = Field(default=10, ge=1, le=200)
    """Results returned when the request says 0."""
    default_context_window_tokens: int = Field(default=32_000, ge=1_000)
    """Used when the gateway does not report a window for the route's model."""
    tool_result_share: float = Field(default=0.3, gt=0, le=1)
    """Layer 1: the largest share of the window one tool result may take."""
    soft_trim_ratio: float = Field(default=0.6, gt=0, le=1)
    """Layer 2: soft-trim old tool results above this share of the window."""
    hard_clear_ratio: float = Field(default=0.8, gt=0, le=1)
    """Layer 2: replace old tool results with a placeholder above this share."""
    max_query_chars: int = Field(default=4_000, ge=1)
    """Longest question a run accepts (INVALID_ARGUMENT naming `query` and this limit)."""
    max_history_turns: int = Field(default=20, ge=0)
    """Most prior conversation turns a run accepts (INVALID_ARGUMENT naming `history`)."""
    max_history_chars: int = Field(default=32_000, ge=0)
    """Most characters of all prior turns together (INVALID_ARGUMENT naming `history`); each
    turn's question is also bounded by `max_query_chars`."""
    keep_last_exchanges: int = Field(default=2, ge=1)
    """Layer 3: exchanges kept verbatim when older ones are compacted into a summary."""
    summarize_max_chars: int = Field(default=24_000, ge=1_000, le=400_000)
    """`summarize`: the most characters of result text one call sends to the gateway (results
    are sent whole until this; the rest are named as not summarised)."""
    summarize_route: str = ""
    """`summarize`: the LLM gateway route that writes summaries; empty: the run's route."""
    rerank_route: str = ""
    """`search`: the LLM gateway route whose model judges a search's first hits before the run's
    model sees them, ordered by how likely it makes "yes, this answers the query"
    (`services/agent/rerank.py`); empty: no judging (the default: with the local 1.5B model it
    cost ~4 s a hit judged here and lost on held-out collections)."""
    rerank_candidates: int = Field(default=10, ge=1, le=50)
    """`search`: how many of a first page's hits are judged (a later page is never reordered)."""
    rerank_max_chars: int = Field(default=300, ge=50, le=4_000)
    """`search`: the most characters of a hit's text a judgment reads (after its title)."""
    rerank_parallel: int = Field(default=4, ge=1, le=50)
    """`search`: judgments of one search sent to the gateway at once."""
    expand_queries: bool = False
    """`search`: each HYBRID or SEMANTIC search also searches with a passage a model wrote to
    answer its query (HyDE: one more variation, the query followed by the passage;
    `services/agent/expand.py`). Off by default: it costs a model call a distinct query."""
    expand_route: str = ""
    """`search`: the LLM gateway route that writes the passages; empty: the run's route."""
    expand_max_tokens: int = Field(default=80, ge=8, le=1_024)
    """`search`: the longest passage written, in tokens."""


class QuestionSettings(BaseModel):
    """Questions to the caller (the opt-in `ask_user` tool) and their two-phase timeout."""

    acknowledge_timeout_s: float = Field(default=10.0, gt=0, le=3_600)
    """How long a run waits for the caller to acknowledge a question (or answer it) before it
    goes on at once with "no answer"; a request may ask for less."""
    answer_timeout_s: float = Field(default=300.0, ge=0)
    """How long a run waits for the answer once the question is acknowledged; 0: until the run's
    deadline (without one, until the caller cancels the stream). A request may ask for less. The
    run's deadline always bounds both waits."""
    max_answer_chars: int = Field(default=4_000, ge=1, le=100_000)
    """Longest answer accepted (INVALID_ARGUMENT naming `text` and this limit)."""
    max_per_run: int = Field(default=3, ge=1, le=20)
    """Questions one run may ask; further `ask_user` calls are refused back to the model."""


class ReplicaSettings(BaseModel):
    """How agent replicas sharing one PostgreSQL tell each other they are alive."""

    name: str = ""
    """This replica's name in the shared tables (run rows, questions, heartbeats); empty: the
    host name and process id (in Kubernetes the pod's name). Must differ between live replicas."""
    heartbeat_interval_s: float = Field(default=5.0, gt=0)
    """How often the replica refreshes its heartbeat (and looks for replicas that stopped)."""
    lease_s: float = Field(default=30.0, gt=0)
    """A replica whose heartbeat is older than this is gone: any other marks its `running` runs
    `interrupted` and forgets its open questions. Several heartbeats long, so a slow database
    or a busy replica is not taken for a dead one."""

    def resolved_name(self) -> str:
        return self.name or f"{socket.gethostname()}-{os.getpid()}"

    @model_validator(mode="after")
    def _lease_spans_heartbeats(self) -> ReplicaSettings:
        if self.lease_s < 2 * self.heartbeat_interval_s:
            raise ValueError("replica.lease_s must be at least two heartbeat intervals")
        return self


class HistorySettings(BaseModel):
    """Run history (`agent.history`)."""

    enabled: bool = True
    """Record every run; off: `GetRun`/`ListRuns` answer FAILED_PRECONDITION."""
    kind: Literal["sqlite", "postgres"] = "sqlite"
    """`sqlite`: an embedded file of this process (one replica). `postgres`: one database shared
    by every replica (runs, questions and heartbeats), at `postgres`."""
    path: Path = Path("./var/agent/runs.sqlite3")
    """The SQLite database file (created with its folder)."""
    postgres: PostgresSettings = Field(default_factory=PostgresSettings)
    """Where the shared database is (`kind: postgres`): the DSN from `dsn_env` or `dsn_file`."""
    replica: ReplicaSettings = Field(default_factory=ReplicaSettings)
    """This replica's name and heartbeat (`kind: postgres`)."""
    queue_limit: int = Field(default=10_000, ge=1)
    """`kind: postgres`: most writes waiting for the database; beyond it (a database down for
    long) a write is dropped, counted and logged instead of held in memory."""
    max_age_days: float = Field(default=30.0, ge=0)
    """Runs older than this are deleted; 0 keeps them whatever their age."""
    max_runs: int = Field(default=100_000, ge=0)
    """At most this many runs are kept (the oldest go first); 0: no limit."""
    sweep_interval_s: float = Field(default=300.0, gt=0)
    """Retention runs at most this often (after a run ends), and when the agent starts."""


class AgentSettings(QuarrySettings):
    """Everything the agent process needs to run."""

    yaml_section: ClassVar[str] = "agent"
    model_config = SettingsConfigDict(
        env_prefix="QUARRY_AGENT_", env_nested_delimiter="__", extra="forbid"
    )

    server: AgentServerSettings | ServerSettings = Field(default_factory=AgentServerSettings)
    search_tool_address: str = "127.0.0.1:50051"
    """Where `quarry.searchtool.v1.SearchToolService` listens."""
    llm_gateway_address: str = "127.0.0.1:50052"
    """Where `quarry.llmgateway.v1.LlmGatewayService` listens."""
    search_tool_tls: ChannelTls = Field(default_factory=ChannelTls)
    """TLS (and the client certificate for mTLS) of the channel to the search tool."""
    llm_gateway_tls: ChannelTls = Field(default_factory=ChannelTls)
    """TLS (and the client certificate for mTLS) of the channel to the LLM gateway."""
    load_balancing: Literal["pick_first", "round_robin"] = "pick_first"
    """`round_robin` with `dns:///<headless service>:<port>` addresses spreads the agent's calls
    over every gateway and search tool pod (Kubernetes); `pick_first` uses one connection."""
    route: str = "agent"
    """Gateway route used when a request names none."""
    default_collection: str = ""
    """Collection used when a request names none; empty means the request must name one."""
    context_window_tokens: int | None = Field(default=None, ge=1_000)
    """Overrides the window the gateway reports for the route's model."""
    loop: LoopSettings = Field(default_factory=LoopSettings)
    questions: QuestionSettings = Field(default_factory=QuestionSettings)
    history: HistorySettings = Field(default_factory=HistorySettings)
    """Run history: every run recorded for `GetRun` / `ListRuns` / `quarry runs`."""
    gateway_api_key_env: str = ""
    """Environment variable holding the API key the agent presents to the LLM gateway (a key
    with `gateway: true`); empty sends none. Towards the search tool the agent forwards each
    caller's own key instead, so the search tool checks the caller's grant."""

    def gateway_api_key(self) -> str:
        return os.environ.get(self.gateway_api_key_env, "") if self.gateway_api_key_env else ""

    @model_validator(mode="after")
    def _gateway_key_is_set(self) -> AgentSettings:
        if self.gateway_api_key_env and not self.gateway_api_key():
            name = self.gateway_api_key_env
            raise ValueError(f"gateway_api_key_env names {name}, which is unset")
        return self
