"""Every overlay's Quarry pods start: each service from the built wheel, as its pod would run it.

For each Quarry workload of each rendered overlay the test lays out the pod's filesystem on this
machine and starts the container's own `args` after the image's `python -m` entry:

* the image's root, and so its working directory (`WORKDIR` of the Containerfile), is READ-ONLY
  unless a volume is mounted there (`readOnlyRootFilesystem: true`);
* every volume mount is a directory of its own: the ConfigMap's files, the Secrets' files (key
  digests from a keys file, TLS certificates made here), empty writable directories for
  `emptyDir` and persistent volumes; the pod's paths in the config, the args and the env are
  rewritten to those directories;
* the container's env as rendered (values, Secret references filled with test secrets), the
  image's own env, nothing from this process;
* without the privilege to write where the pod cannot: as root, the test drops every
  capability (`setpriv`), so a read-only mode holds as it does for the pod's non-root user (the
  interpreter of this machine may sit where only root reaches it, so the uid stays).

Only where it listens changes (the pods' fixed ports are not ours to bind here): host, port and
health port through the env. The service must become SERVING on its readiness name and
on `quarry.liveness` on the plaintext health port (what the kubelet probes), still be running, and
exit 0 on SIGTERM. A service that cannot start (an unwritable path, a missing setting, a file its
config names but its pod does not mount) fails here with its log.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import grpc
import psycopg
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from bench.ports import free_ports
from services.common.server import LIVENESS_SERVICE
from tests.common.certs import issue, make_ca
from tests.deploy.test_manifests import AGENT_DB_SECRET, OVERLAYS, QUARRY, Doc, rendered

ROOT = Path(__file__).resolve().parents[2]
STARTUP_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 60.0
KEYS_FILE = "- {name: billing, sha256: " + "ab" * 32 + ", read: [docs]}\n"
"""What `quarry keygen --name billing --read docs` prints (the digest of some key)."""
POSTGRES_SECRET = "quarry-postgres"
"""The postgres overlays' DSN (and CA): here the DSN of a database of the embedded PostgreSQL."""
POD_NAME = "agent-7d9c4b5f6-x2x9q"
"""`metadata.name` of the pod (what `fieldRef` env gives)."""
SECRET_VALUES = {("quarry-api-keys", "agent-gateway-key"): "qk_agent-gateway-key-for-the-test"}
"""The values the Secrets referenced by `secretKeyRef` hold in this test."""


def _containerfile() -> tuple[str, dict[str, str]]:
    """The image's working directory and the env its `runtime` stage sets (every service's
    target is built on it)."""
    text = (ROOT / "Containerfile").read_text()
    final = text.split(" AS runtime\n", 1)[1].split("\nFROM ", 1)[0]
    (workdir,) = re.findall(r"^WORKDIR (\S+)$", final, flags=re.M)
    (block,) = re.findall(r"^ENV (.*?)(?<!\\)\n", final, flags=re.M | re.S)
    pairs = re.findall(r"(\w+)=(\S+)", block.replace("\\\n", " "))
    return workdir, {k: v for k, v in pairs if k != "PATH"}


@dataclass
class PodFilesystem:
    """The pod's paths laid out under one host directory."""

    base: Path
    mounts: dict[str, Path] = field(default_factory=dict)
    """Mount path in the pod → host directory."""

    def host(self, text: str) -> str:
        """`text` with every mounted pod path rewritten to its host directory (in one pass: a
        host directory is never rewritten again)."""
        if not self.mounts:
            return text
        paths = "|".join(re.escape(p) for p in sorted(self.mounts, key=len, reverse=True))
        pattern = rf"(?<![\w./-])({paths})(?![\w.-])"
        return re.sub(pattern, lambda m: str(self.mounts[m[1]]), text)

    def directory(self, pod_path: str) -> Path:
        """The host directory of `pod_path`: inside its mount, or on the read-only root."""
        mounted = self.host(pod_path)
        if mounted != pod_path:
            return Path(mounted)
        return self.base / "root" / PurePosixPath(pod_path).relative_to("/")


@dataclass
class Pod:
    command: list[str]
    env: dict[str, str]
    cwd: Path
    health_port: int


def _secret_files(
    name: str, directory: Path, database_dsn: str | None = None, agent_dsn: str = ""
) -> None:
    if name == AGENT_DB_SECRET:
        assert agent_dsn, "the pod mounts the agent's database Secret: the test gives it one"
        (directory / "dsn").write_text(agent_dsn + "\n")
    elif name == "quarry-api-key-digests":
        (directory / "keys.yaml").write_text(KEYS_FILE)
    elif name == "quarry-tls":
        ca = make_ca(directory, "ca")
        issue(ca, directory, "tls", server_and_client=True)
    elif name == POSTGRES_SECRET:
        assert database_dsn is not None, "the postgres overlays' search tool needs a database"
        (directory / "dsn").write_text(database_dsn)
        ca = make_ca(directory / "..", f"{directory.name}-ca")
        (directory / "ca.crt").write_bytes(Path(ca.cert_file).read_bytes())
    else:
        raise AssertionError(f"the test has no files for the Secret {name}: add them")


def _env(container: Doc) -> dict[str, str]:
    """The container's env: values as rendered, required Secret keys filled with test values;
    an optional Secret key stays unset (a cluster without, say, an LLM vendor's key)."""
    env = {}
    for variable in container.get("env", []):
        ref = variable.get("valueFrom", {}).get("secretKeyRef", {})
        if not ref.get("optional", False):
            env[variable["name"]] = _env_value(variable)
    return env


def _env_value(variable: Doc) -> str:
    if "value" in variable:
        return str(variable["value"])
    if "fieldRef" in variable["valueFrom"]:
        field = variable["valueFrom"]["fieldRef"]["fieldPath"]
        assert field == "metadata.name", f"{variable['name']}: the test knows only the pod name"
        return POD_NAME
    ref = variable["valueFrom"].get("secretKeyRef")
    assert ref is not None, f"{variable['name']}: the test fills only Secret references"
    key = (ref["name"], ref["key"])
    assert key in SECRET_VALUES, f"the test has no value for the Secret key {key}: add it"
    return SECRET_VALUES[key]


def _lay_out(
    workload: Doc,
    docs: tuple[Doc, ...],
    base: Path,
    *,
    database_dsn: str | None = None,
    agent_dsn: str = "",
) -> Pod:
    pod = workload["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    claims = {c["metadata"]["name"] for c in workload["spec"].get("volumeClaimTemplates", [])}
    (config_map,) = [d for d in docs if d["kind"] == "ConfigMap"]
    fs = PodFilesystem(base)
    for mount in container.get("volumeMounts", []):
        directory = base / "mounts" / mount["name"]
        directory.mkdir(parents=True)
        fs.mounts[mount["mountPath"]] = directory
        volume = volumes.get(mount["name"])
        if volume is None:
            assert mount["name"] in claims, f"{mount['name']}: no volume and no claim template"
        elif "configMap" in volume:
            assert volume["configMap"]["name"] == config_map["metadata"]["name"]
        elif "secret" in volume:
            _secret_files(volume["secret"]["secretName"], directory, database_dsn, agent_dsn)
        else:
            assert {"emptyDir", "persistentVolumeClaim"} & set(volume), volume
    for mount in container.get("volumeMounts", []):
        volume = volumes.get(mount["name"], {})
        if "configMap" in volume:
            for name, text in config_map["data"].items():
                (fs.mounts[mount["mountPath"]] / name).write_text(fs.host(text))
    workdir, image_env = _containerfile()
    cwd = fs.directory(workdir)
    cwd.mkdir(parents=True, exist_ok=True)
    read_only = base / "root"
    if read_only.exists():
        for path in [read_only, *read_only.rglob("*")]:
            path.chmod(0o555)
    port, health_port = free_ports(2)
    module = container["args"][0]
    section = "QUARRY_" + module.removeprefix("services.").upper()
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": "/nonexistent",
        **{k: fs.host(v) for k, v in image_env.items()},
        **{name: fs.host(value) for name, value in _env(container).items()},
        f"{section}_SERVER__HOST": "127.0.0.1",
        f"{section}_SERVER__PORT": str(port),
        f"{section}_SERVER__HEALTH_PORT": str(health_port),
    }
    env.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)  # no collector here; the pod's is unreachable
    args = [fs.host(a) for a in container["args"]]
    return Pod(
        command=["-m", *args],
        env=env,
        cwd=cwd,
        health_port=health_port,
    )


def _unprivileged() -> list[str]:
    """The prefix that runs a command without the privilege to ignore file modes."""
    if os.geteuid() != 0:
        return []
    return ["setpriv", "--bounding-set=-all", "--inh-caps=-all", "--"]


@pytest.fixture
def scratch() -> Iterator[Path]:
    """A world-traversable directory (the pod's user must reach its mounts)."""
    base = Path(tempfile.mkdtemp(prefix="quarry-pod-"))
    base.chmod(0o755)
    try:
        yield base
    finally:
        for path in base.rglob("*"):
            if path.is_dir():
                path.chmod(0o755)
        subprocess.run(["rm", "-rf", str(base)], check=False)


def _wait_serving(port: int, names: tuple[str, ...], process: subprocess.Popen[bytes]) -> None:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        ready = grpc.channel_ready_future(channel)
        waited = 0.0
        while not ready.done():  # a service that exits is not waited for
            assert process.poll() is None, "the service exited before it listened"
            assert waited < STARTUP_TIMEOUT_S, "the health port never opened"
            try:
                ready.result(timeout=0.5)
            except grpc.FutureTimeoutError:
                waited += 0.5
        health = health_pb2_grpc.HealthStub(channel)
        for name in names:
            watch = health.Watch(
                health_pb2.HealthCheckRequest(service=name), timeout=STARTUP_TIMEOUT_S
            )
            for reply in watch:
                if reply.status == health_pb2.HealthCheckResponse.SERVING:
                    watch.cancel()
                    break
    assert process.poll() is None, "the service exited after it reported SERVING"


def _wait_logged(log: Path, text: str, process: subprocess.Popen[bytes]) -> None:
    """Wait until the service's log says `text` (it probes the database at once)."""
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while text not in log.read_text(errors="replace"):
        assert process.poll() is None, "the service exited"
        assert time.monotonic() < deadline, f"the log never said {text!r}"
        time.sleep(0.2)


def _assert_not_ready(port: int, name: str) -> None:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        reply = health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service=name), timeout=10
        )
    assert reply.status == health_pb2.HealthCheckResponse.NOT_SERVING


def _wait_for_the_agents_schema(dsn: str, process: subprocess.Popen[bytes], log: Path) -> None:
    """The pod's agent migrated its database and heartbeats as the pod's name."""
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline and process.poll() is None:
        with psycopg.connect(dsn) as conn:
            tables = conn.execute("SELECT to_regclass('agent_replicas') IS NOT NULL").fetchone()
            if tables and tables[0]:
                rows = conn.execute("SELECT replica FROM agent_replicas").fetchall()
                if rows:
                    assert [r[0] for r in rows] == [POD_NAME]
                    return
        time.sleep(0.2)
    raise AssertionError(f"the agent never laid out its history schema:\n{log.read_text()[-3000:]}")


def _cases() -> list[Any]:
    return [
        pytest.param(overlay, name, id=f"{overlay}-{name}")
        for overlay in OVERLAYS
        for name in QUARRY
    ]


@pytest.mark.slow
@pytest.mark.parametrize(("overlay", "name"), _cases())
def test_every_overlays_quarry_pod_starts_from_the_wheel_on_a_read_only_root(
    overlay: str, name: str, installed: Path, scratch: Path, request: pytest.FixtureRequest
) -> None:
    """The postgres overlays' search tool reads a real database (the embedded PostgreSQL). That
    server has no TLS: `postgres-trial` (no TLS in the namespace) becomes SERVING; `postgres`
    (`sslmode: verify-full`) must start, stay live and report NOT_SERVING, as against any
    database whose certificate it cannot verify. An agent that mounts its database Secret
    (k8s/components/agent-postgres) gets a database too and must have laid out its schema and
    heartbeated under its pod's name."""
    docs = rendered(overlay)
    (workload,) = [
        d
        for d in docs
        if d["kind"] in ("Deployment", "StatefulSet") and d["metadata"]["name"] == name
    ]
    needs_database = overlay.startswith("postgres") and name == "search-tool"
    dsn = str(request.getfixturevalue("postgres_dsn")) if needs_database else None
    volumes = workload["spec"]["template"]["spec"].get("volumes", [])
    shared = any(v.get("secret", {}).get("secretName") == AGENT_DB_SECRET for v in volumes)
    agent_dsn = str(request.getfixturevalue("postgres_dsn")) if shared else ""
    pod = _lay_out(workload, docs, scratch, database_dsn=dsn, agent_dsn=agent_dsn)
    unverifiable = needs_database and overlay == "postgres"
    log = scratch / "pod.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [*_unprivileged(), str(installed), *pod.command],
            cwd=pod.cwd,
            env=pod.env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    # the search tool on Vespa is ready only while Vespa answers with Quarry's package (issue 29),
    # and no Vespa runs here: it must come up live, ask, and report NOT_SERVING
    needs_vespa = overlay == "vespa" and name == "search-tool"
    try:
        try:
            if unverifiable or needs_vespa:
                _wait_serving(pod.health_port, (LIVENESS_SERVICE,), process)
                reason = "engine not ready" if needs_vespa else "database unreachable"
                _wait_logged(log, reason, process)
                _assert_not_ready(pod.health_port, QUARRY[name][1])
            else:
                _wait_serving(pod.health_port, (QUARRY[name][1], LIVENESS_SERVICE), process)
        except Exception as error:
            tail = log.read_text()[-4000:]
            raise AssertionError(
                f"{overlay}: {name} did not start (exit {process.poll()}):\n{tail}"
            ) from error
        if agent_dsn:
            _wait_for_the_agents_schema(agent_dsn, process, log)
        process.send_signal(signal.SIGTERM)
        started = time.monotonic()
        code = process.wait(timeout=STOP_TIMEOUT_S)
        assert code == 0, f"{name} exited {code} on SIGTERM:\n{log.read_text()[-4000:]}"
        assert time.monotonic() - started < STOP_TIMEOUT_S
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
