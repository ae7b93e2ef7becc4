"""The one settings loader: defaults < YAML file section < `QUARRY_*` environment < explicit values.

Each service declares a `QuarrySettings` subclass with its own `env_prefix` and `yaml_section`. The
YAML file comes from `--config` or `QUARRY_CONFIG`; one file may hold the sections of all services.
Secrets (API keys) are read from the environment only, never from the file.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, ClassVar, Literal, TypeVar

from pydantic import BaseModel, Field, model_validator
from pydantic_settings import (
    BaseSettings,
    InitSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    YamlConfigSettingsSource,
)

from services.common.auth import AuthSettings
from services.common.tls import ServerTls

CONFIG_ENV = "QUARRY_CONFIG"

S = TypeVar("S", bound="QuarrySettings")


class ServerSettings(BaseModel):
    """Where and how a gRPC server listens."""

    host: str = "127.0.0.1"
    """Interface to bind; `0.0.0.0` in containers."""
    port: int = Field(default=0, ge=0, le=65535)
    """TCP port; 0 picks a free one (tests)."""
    grace_s: float = Field(default=10.0, ge=0)
    """How long in-flight calls may finish once the server stops accepting calls (after
    `drain_window_s`); calls still running then are cut."""
    drain_window_s: float = Field(default=0.0, ge=0)
    """After SIGTERM, how long the server keeps accepting and serving new calls while readiness
    health already reads NOT_SERVING, so load balancers that poll health see the drain and move
    traffic away before the listener closes. Set it to a health checker's interval times its
    unhealthy threshold; 0 stops accepting at once (Kubernetes' `preStop` sleep does that job
    for Services). SIGINT (Ctrl-C) skips it."""
    max_message_mb: int = Field(default=32, ge=1)
    """Largest request or response accepted, in MiB (larger: RESOURCE_EXHAUSTED from gRPC)."""
    max_concurrent_rpcs: int | None = Field(default=None, ge=1)
    """Admission control: most calls of the service's own methods it runs at once, over all
    connections; the next is refused at once with RESOURCE_EXHAUSTED (reason `OVERLOADED`,
    RetryInfo `overload_retry_after_s`) naming this limit, instead of queued until its deadline.
    Health and reflection are never counted. None: unlimited. Each service sets its own default."""
    overload_retry_after_s: float = Field(default=1.0, gt=0)
    """The RetryInfo delay of a call refused by admission control."""
    max_concurrent_streams: int | None = Field(default=None, ge=1)
    """Most calls one HTTP/2 connection may have open at once (SETTINGS_MAX_CONCURRENT_STREAMS).
    None: gRPC's default, no limit. grpc clients do not queue beyond a set limit: calls over it
    fail UNAVAILABLE (RST_STREAM REFUSED_STREAM), and the agent multiplexes every run's searches
    over one connection, so bound work with `max_concurrent_rpcs` instead."""
    max_connection_age_s: float | None = Field(default=None, gt=0)
    """Close each client connection (GOAWAY, after its calls finish) once it is this old, so
    clients re-resolve DNS and reach pods added by a scale-up. None: connections live on."""
    auth: AuthSettings = Field(default_factory=AuthSettings)
    """API keys (by digest) and what each may do; off by default."""
    tls: ServerTls = Field(default_factory=ServerTls)
    """Certificate and key (TLS), and a client CA (mTLS); plaintext when unset."""
    cpu_nice: int = Field(default=0, ge=0, le=19)
    """CPU niceness the whole process runs at (every thread, also those started later; 0 leaves
    it unchanged). Only lowers priority, so no privilege is needed. On a machine the services
    share, the heavy worker yields the CPU under contention and the front door keeps answering
    (admission refusals, health, streams); in a container of its own it changes nothing. The
    search tool defaults to 10 (README.md, "Measured performance"), the others to 0."""
    event_loop: Literal["uvloop", "asyncio"] = "uvloop"
    """The event loop the service runs on: `uvloop` (libuv, in Cython) or the standard
    library's `asyncio`. uvloop spends less CPU per turn of the loop, and on a busy server every
    admitted call's step and every refusal costs a few turns: 9 % less server CPU per refused
    call (`bench/accept_burst.py --compare-loop`), 6 % more end-to-end goodput
    (`bench/load_e2e.py`, README "Measured performance")."""
    gc_freeze: bool = True
    """Once started, collect garbage and move every object then alive (modules, descriptors,
    SDK and model state) to the garbage collector's permanent generation, so each later full
    collection walks only what the service allocated since. A full collection stops the event
    loop: under load without it the agent paused 31–52 ms and the search tool 65–106 ms (the
    gateway's start-up heap alone takes 57–98 ms), with it 5–9 and 2–4 ms (`bench/load_e2e.py
    --gc-probe`, README "Measured performance"). Startup objects that later become cyclic
    garbage are not reclaimed."""
    health_port: int | None = Field(default=None, ge=0, le=65535)
    """A second, plaintext port serving only the gRPC health service (no other service, no
    reflection), for probes that cannot speak TLS (the kubelet's); 0 picks a free one. None: off."""

    @model_validator(mode="after")
    def _distinct_ports(self) -> ServerSettings:
        if self.health_port and self.health_port == self.port:
            raise ValueError("server.health_port must differ from server.port")
        return self


class QuarrySettings(BaseSettings):
    """Base of every service's settings."""

    yaml_section: ClassVar[str] = ""
    config_file: ClassVar[Path | None] = None

    model_config = SettingsConfigDict(env_nested_delimiter="__", extra="forbid")

    server: ServerSettings = Field(default_factory=ServerSettings)
    log_level: str = "INFO"
    """Python logging level name."""
    log_format: str = "json"
    """`json` (one object per line) or `text`."""

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings, env_settings, _yaml_section(settings_cls))


def load_settings(cls: type[S], config_file: str | Path | None = None, **overrides: Any) -> S:
    """Build `cls` from the YAML file (argument, else `$QUARRY_CONFIG`), env and overrides."""
    path = config_file or os.environ.get(CONFIG_ENV) or None
    if path and not Path(path).is_file():
        raise FileNotFoundError(f"config file {path} does not exist")
    previous = cls.config_file
    cls.config_file = Path(path) if path else None
    try:
        return cls(**overrides)
    finally:
        cls.config_file = previous


def _yaml_section(settings_cls: type[BaseSettings]) -> PydanticBaseSettingsSource:
    """pydantic-settings' own YAML source, reading the class's section; a file without that
    section (one file may configure only some services) leaves the defaults."""
    path: Path | None = getattr(settings_cls, "config_file", None)
    if path is None:
        return InitSettingsSource(settings_cls, {})
    section = getattr(settings_cls, "yaml_section", "") or None
    try:
        return YamlConfigSettingsSource(settings_cls, yaml_file=path, yaml_config_section=section)
    except KeyError:
        return InitSettingsSource(settings_cls, {})
    except TypeError as error:
        raise ValueError(f"config file {path}: {error}") from error
