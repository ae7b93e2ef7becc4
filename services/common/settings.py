"""The one settings loader: defaults < YAML file section < `QUARRY_*` environment < explicit values.

Each service declares a `QuarrySettings` subclass with its own `env_prefix` and `yaml_section`. The
YAML file comes from `--config` or `QUARRY_CONFIG`; one file may hold the sections of all services.
Secrets (API keys) are read from the environment only, never from the file.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import yaml
from pydantic import BaseModel, Field
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

CONFIG_ENV = "QUARRY_CONFIG"

S = TypeVar("S", bound="QuarrySettings")


class ServerSettings(BaseModel):
    """Where and how a gRPC server listens."""

    host: str = "127.0.0.1"
    """Interface to bind; `0.0.0.0` in containers."""
    port: int = Field(default=0, ge=0, le=65535)
    """TCP port; 0 picks a free one (tests)."""
    grace_s: float = Field(default=10.0, ge=0)
    """How long in-flight calls may finish after SIGTERM."""
    max_message_mb: int = Field(default=32, ge=1)
    """Largest request or response accepted, in MiB."""


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
        return (init_settings, env_settings, _YamlSectionSource(settings_cls))


def load_settings(cls: type[S], config_file: str | Path | None = None, **overrides: Any) -> S:
    """Build `cls` from the YAML file (argument, else `$QUARRY_CONFIG`), env and overrides."""
    path = config_file or os.environ.get(CONFIG_ENV) or None
    previous = cls.config_file
    cls.config_file = Path(path) if path else None
    try:
        return cls(**overrides)
    finally:
        cls.config_file = previous


class _YamlSectionSource(PydanticBaseSettingsSource):
    def __init__(self, settings_cls: type[BaseSettings]) -> None:
        super().__init__(settings_cls)
        self._data = self._load(settings_cls)

    @staticmethod
    def _load(settings_cls: type[BaseSettings]) -> dict[str, Any]:
        path = getattr(settings_cls, "config_file", None)
        if path is None:
            return {}
        if not path.exists():
            raise FileNotFoundError(f"config file {path} does not exist")
        document = yaml.safe_load(path.read_text()) or {}
        if not isinstance(document, dict):
            raise ValueError(f"config file {path}: top level must be a mapping")
        section = getattr(settings_cls, "yaml_section", "")
        data = document.get(section, {}) if section else document
        if not isinstance(data, dict):
            raise ValueError(f"config file {path}: section {section!r} must be a mapping")
        return data

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return self._data.get(field_name), field_name, False

    def __call__(self) -> dict[str, Any]:
        return dict(self._data)
