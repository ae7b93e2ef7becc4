"""API-key authentication and per-collection authorisation, one interceptor for every service.

A caller sends `authorization: Bearer <key>`. The configuration holds only each key's SHA-256
(keys are long random tokens, so a plain digest cannot be reversed; `quarry keygen` makes a key
and its digest), its name, the collections it may read and write (`*` is every collection; write
implies read) and whether it may call the LLM gateway directly.

Every RPC of a service declares its `Access` in a `MethodRule` table (`build_server` refuses a
service whose table misses a method, so a new RPC cannot be forgotten). The interceptor enforces
the table on the deserialized request, where the collection is known, before the servicer runs:

    missing or unknown key                   UNAUTHENTICATED
    collection outside the key's grant       PERMISSION_DENIED naming the collection
    gateway method, key without `gateway`    PERMISSION_DENIED
    web search, key with `web_search: false` PERMISSION_DENIED

Health and reflection stay open. The caller of the running RPC is kept in a context variable:
`visible_collections` filters `ListCollections`, and `ForwardCallerKey` (a client interceptor)
sends the caller's own key on the agent's calls to the search tool, so the search tool checks the
caller's grant again and a caller never reaches through the agent what it cannot reach directly.
Keys never appear in logs, spans or error messages: errors name the key's configured `name`.
"""

from __future__ import annotations

import contextvars
import hashlib
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

import grpc
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from services.common.errors import PermissionDenied, Unauthenticated

ALL_COLLECTIONS = "*"
OPEN_SERVICES = ("grpc.health.v1.Health", "grpc.reflection.v1alpha.ServerReflection")
"""Services every caller may use without a key (probes, grpcurl's reflection)."""


def is_open_method(method: str) -> bool:
    """Whether `method` (`/package.Service/Method`) belongs to one of `OPEN_SERVICES`."""
    return method.split("/")[1] in OPEN_SERVICES


_HEADER = "authorization"
_SCHEME = "bearer "


def key_digest(key: str) -> str:
    """The SHA-256 hex digest of `key`: what the configuration stores."""
    return hashlib.sha256(key.encode()).hexdigest()


class ApiKey(BaseModel):
    """One API key, by its digest, and what it may do."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    """Who holds the key (e.g. `billing-backend`); the only identity logs and errors show."""
    sha256: str
    """Hex SHA-256 of the key (`quarry keygen`); the key itself is never configured."""
    read: list[str] = Field(default_factory=list)
    """Collections the key may search and inspect; `*` is every collection."""
    write: list[str] = Field(default_factory=list)
    """Collections the key may write to and delete (and read); `*` is every collection."""
    gateway: bool = False
    """Whether the key may call the LLM gateway directly (the agent's own key does)."""
    web_search: bool = True
    """Whether the key may search the web (the search tool's `WebSearch`, the agent's
    `web_search` tool). Web results ignore every collection grant and caller filter, so an
    operator who must keep a key's answers inside its collections sets this to false."""

    @field_validator("sha256")
    @classmethod
    def _hex_digest(cls, value: str) -> str:
        value = value.strip().lower()
        if len(value) != 64 or any(c not in "0123456789abcdef" for c in value):
            raise ValueError("must be the 64-hex-digit SHA-256 of the key (see `quarry keygen`)")
        return value

    def may_read(self, collection: str) -> bool:
        return self.may_write(collection) or bool({collection, ALL_COLLECTIONS} & set(self.read))

    def may_write(self, collection: str) -> bool:
        return bool({collection, ALL_COLLECTIONS} & set(self.write))


class AuthSettings(BaseModel):
    """API-key authentication of a server (off by default; on in the Kubernetes overlays)."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = False
    """Require a configured key on every RPC except health and reflection."""
    keys: list[ApiKey] = Field(default_factory=list)
    """The accepted keys, by digest."""
    keys_file: Path | None = None
    """A YAML list of more keys (the same fields as `keys`; `quarry keygen --name` prints one
    entry), read once at start: in Kubernetes, a Secret mounted as a file. A missing or
    unreadable file stops the start."""

    @model_validator(mode="after")
    def _load_keys_file(self) -> AuthSettings:
        if self.keys_file is not None:
            self.keys = [*self.keys, *read_keys_file(self.keys_file)]
        for attribute in ("name", "sha256"):
            values = [getattr(k, attribute) for k in self.keys]
            if len(values) != len(set(values)):
                raise ValueError(f"two keys share a {attribute}")
        return self


def read_keys_file(path: Path) -> list[ApiKey]:
    """The keys listed in `path` (a YAML list of `ApiKey` fields; empty: none)."""
    try:
        entries = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as error:
        reason = getattr(error, "strerror", None) or type(error).__name__
        raise ValueError(f"auth.keys_file {path}: cannot read it ({reason})") from None
    except yaml.YAMLError as error:
        raise ValueError(f"auth.keys_file {path}: not valid YAML ({error})") from None
    if entries is None:
        return []
    if not isinstance(entries, list):
        raise ValueError(f"auth.keys_file {path}: must be a YAML list of keys")
    keys = []
    for number, entry in enumerate(entries, start=1):
        try:
            keys.append(ApiKey.model_validate(entry))
        except ValidationError as error:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or 'entry'}: {e['msg']}"
                for e in error.errors()
            )
            raise ValueError(f"auth.keys_file {path}: key {number}: {problems}") from None
    return keys


class Access(Enum):
    """What an RPC requires of its caller."""

    OPEN = "open"
    AUTHENTICATED = "authenticated"
    READ = "read"
    WRITE = "write"
    GATEWAY = "gateway"
    WEB_SEARCH = "web_search"


@dataclass(frozen=True)
class MethodRule:
    """The access one RPC requires, and where its request names the collection."""

    access: Access
    collection: Callable[[Any], str] | None = None
    """The collection a READ or WRITE request acts on."""


def collection_field(request: Any) -> str:
    """The usual collection getter: the request's `collection` field."""
    return str(request.collection)


_UNDECLARED = MethodRule(Access.GATEWAY)
READ = MethodRule(Access.READ, collection_field)
WRITE = MethodRule(Access.WRITE, collection_field)
AUTHENTICATED = MethodRule(Access.AUTHENTICATED)
GATEWAY = MethodRule(Access.GATEWAY)
WEB_SEARCH = MethodRule(Access.WEB_SEARCH)


@dataclass(frozen=True)
class Caller:
    """Who sent the running RPC: the matching key (None when auth is off) and the credential
    as received, kept only to forward it downstream."""

    key: ApiKey | None
    credential: str


_CALLER: contextvars.ContextVar[Caller | None] = contextvars.ContextVar(
    "quarry_caller", default=None
)


def current_caller() -> Caller | None:
    return _CALLER.get()


def visible_collections(names: Sequence[str]) -> list[str]:
    """The names the running RPC's caller may read (all of them when auth is off)."""
    caller = _CALLER.get()
    if caller is None or caller.key is None:
        return list(names)
    key = caller.key
    return [n for n in names if key.may_read(n)]


def require_caller_permission(permission: str, what: str) -> None:
    """Refuse (PERMISSION_DENIED naming the key) when the running RPC's caller holds a key whose
    boolean `permission` (an `ApiKey` field, e.g. `web_search`) is false; nothing when auth is
    off. `what` completes "API key '<name>' may not …"."""
    caller = _CALLER.get()
    if caller is None or caller.key is None:
        return
    if not getattr(caller.key, permission, False):
        raise PermissionDenied(
            f"API key '{caller.key.name}' may not {what}", metadata={"permission": permission}
        )


class AuthInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[type-arg]
    """Authenticates and authorises every RPC by its `MethodRule` (see the module docstring).

    With auth off it enforces nothing but still records the caller's credential for forwarding.
    """

    def __init__(self, settings: AuthSettings, rules: Mapping[str, MethodRule]) -> None:
        self._enabled = settings.enabled
        self._keys = {k.sha256: k for k in settings.keys}
        self._rules = dict(rules)

    async def intercept_service(
        self,
        continuation: Callable[
            [grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[Any, Any]]
        ],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any]:
        handler = await continuation(handler_call_details)
        method = handler_call_details.method
        if handler is None or is_open_method(method):
            return handler
        rule = self._rules.get(method, _UNDECLARED)
        if handler.unary_unary is not None:
            return grpc.unary_unary_rpc_method_handler(
                self._unary(handler.unary_unary, rule),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        if handler.unary_stream is not None:
            return grpc.unary_stream_rpc_method_handler(
                self._stream(handler.unary_stream, rule),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        raise TypeError(f"{method}: only unary-request methods can be authorised")

    def _unary(self, inner: Any, rule: MethodRule) -> Any:
        async def unary(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
            _CALLER.set(self.authorise(rule, request, _credential(context)))
            return await inner(request, context)

        return unary

    def _stream(self, inner: Any, rule: MethodRule) -> Any:
        if not inspect.isasyncgenfunction(inner) and not inspect.isasyncgenfunction(
            getattr(inner, "__func__", None)
        ):
            return self._unary(inner, rule)

        async def stream(
            request: Any, context: grpc.aio.ServicerContext[Any, Any]
        ) -> AsyncIterator[Any]:
            _CALLER.set(self.authorise(rule, request, _credential(context)))
            async for item in inner(request, context):
                yield item

        return stream

    def authorise(self, rule: MethodRule, request: Any, credential: str) -> Caller:
        """The caller of a request under `rule`, or the error that refuses it."""
        if not self._enabled:
            return Caller(None, credential)
        key = self._authenticate(credential)
        if rule is _UNDECLARED:
            raise PermissionDenied("this method declares no access rule")
        if rule.access is Access.GATEWAY and not key.gateway:
            raise PermissionDenied(f"API key '{key.name}' may not call the LLM gateway directly")
        if rule.access is Access.WEB_SEARCH and not key.web_search:
            raise PermissionDenied(
                f"API key '{key.name}' may not search the web", metadata={"tool": "web_search"}
            )
        if rule.access in (Access.READ, Access.WRITE) and rule.collection is not None:
            collection = rule.collection(request)
            allowed = key.may_write if rule.access is Access.WRITE else key.may_read
            if not allowed(collection):
                verb = rule.access.value
                raise PermissionDenied(
                    f"API key '{key.name}' may not {verb} collection '{collection}'",
                    metadata={"collection": collection, "access": verb},
                )
        return Caller(key, credential)

    def _authenticate(self, credential: str) -> ApiKey:
        if not credential:
            raise Unauthenticated("missing API key: send metadata `authorization: Bearer <key>`")
        if not credential.lower().startswith(_SCHEME):
            raise Unauthenticated("the authorization metadata must be `Bearer <key>`")
        key = self._keys.get(key_digest(credential[len(_SCHEME) :].strip()))
        if key is None:
            raise Unauthenticated("unknown API key")
        return key


def _credential(context: grpc.aio.ServicerContext[Any, Any]) -> str:
    for name, value in context.invocation_metadata() or ():
        if name == _HEADER and isinstance(value, str):
            return value
    return ""


def check_rules(service: str, methods: Sequence[str], rules: Mapping[str, MethodRule]) -> None:
    """Fail when a method of `service` has no rule: every RPC must declare its access."""
    missing = [m for m in methods if f"/{service}/{m}" not in rules]
    if missing:
        raise ValueError(f"{service}: no access rule for {', '.join(missing)}")


# --- the client side ---------------------------------------------------------------------------


def _with_authorization(details: grpc.aio.ClientCallDetails, value: str) -> Any:
    metadata = grpc.aio.Metadata(
        *[(k, v) for k, v in (details.metadata or ()) if k != _HEADER], (_HEADER, value)
    )
    return grpc.aio.ClientCallDetails(
        details.method, details.timeout, metadata, details.credentials, details.wait_for_ready
    )


class _CredentialInterceptor(
    grpc.aio.UnaryUnaryClientInterceptor,  # type: ignore[type-arg]
    grpc.aio.UnaryStreamClientInterceptor,  # type: ignore[type-arg]
):
    def credential(self) -> str:
        raise NotImplementedError

    def _details(self, details: grpc.aio.ClientCallDetails) -> Any:
        value = self.credential()
        return _with_authorization(details, value) if value else details

    async def intercept_unary_unary(
        self, continuation: Any, client_call_details: Any, request: Any
    ) -> Any:
        return await continuation(self._details(client_call_details), request)

    async def intercept_unary_stream(
        self, continuation: Any, client_call_details: Any, request: Any
    ) -> Any:
        return await continuation(self._details(client_call_details), request)


class StaticKey(_CredentialInterceptor):
    """Sends one API key on every call (clients, and the agent towards the gateway)."""

    def __init__(self, key: str) -> None:
        self._value = f"Bearer {key}" if key else ""

    def credential(self) -> str:
        return self._value


class ForwardCallerKey(_CredentialInterceptor):
    """Sends the running RPC's caller credential on every call made on its behalf (nothing when
    the caller sent none): the downstream service checks the caller's own grant."""

    def credential(self) -> str:
        caller = _CALLER.get()
        return caller.credential if caller else ""
