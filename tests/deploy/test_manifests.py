"""k8s/: every overlay renders (`kubectl kustomize`), validates against the Kubernetes API schemas
(`kubernetes-validate`, strict, offline) and keeps the deployment rules (the policy tests below).

kubectl and kubernetes-validate are dev dependencies: a missing tool fails, it does not skip.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from functools import cache
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import urlsplit

import kubernetes_validate
import pytest
import yaml

from quarry_cli.vespa_deploy import EXIT_REJECTED
from services.agent.config import AgentSettings, HistorySettings
from services.common.server import LIVENESS_SERVICE
from services.common.settings import QuarrySettings, load_settings
from services.llm_gateway.config import GatewaySettings
from services.search_tool.config import SearchToolSettings

ROOT = Path(__file__).resolve().parents[2]
KUBECTL = Path(sys.executable).parent / "kubectl"
K8S_VERSION = "1.33.0"
"""Oldest Kubernetes the manifests support (native `preStop.sleep` is on by default from 1.30,
gRPC probes GA since 1.27)."""
OVERLAYS = ["embedded", "embedded-tls", "vespa", "postgres", "postgres-trial"]
STATELESS_SEARCH = {"vespa", "postgres", "postgres-trial"}
"""Overlays whose search tool is a Deployment with an HPA (its engine is a server)."""
ENGINE_OF = {"vespa": "vespa", "postgres": "postgres", "postgres-trial": "postgres"}
QUARRY: dict[str, tuple[str, str, str, type[QuarrySettings]]] = {
    "agent": ("services.agent", "quarry.agent.v1.AgentService", "agent", AgentSettings),
    "llm-gateway": (
        "services.llm_gateway",
        "quarry.llmgateway.v1.LlmGatewayService",
        "llm_gateway",
        GatewaySettings,
    ),
    "search-tool": (
        "services.search_tool",
        "quarry.searchtool.v1.SearchToolService",
        "search_tool",
        SearchToolSettings,
    ),
}
MARGIN_S = 5
HEALTH_PORT = 50060
KEY_DIGESTS_SECRET = "quarry-api-key-digests"
TLS_SECRET = "quarry-tls"
AGENT_DB_SECRET = "quarry-agent-postgres"
"""The agent's PostgreSQL DSN (key `dsn`), mounted as a file where the history is shared."""
POSTGRES_SECRET = "quarry-postgres"
"""The search tool's database DSN (and CA) in the postgres overlays."""
POSTGRES_TRIAL_SECRET = "quarry-postgres-trial"
PINNED_IMAGE = re.compile(r"[\w.-]+(/[\w.-]+)*(:\d+\.\d+\.\d+[\w.-]*|@sha256:[0-9a-f]{64})")
"""An exact version tag (major.minor.patch, e.g. `:0.1.0`, `:8.687.75`) or a digest: never
`latest`, never a floating `:8` or `:3.11-slim`."""
RUN_BYTES = 68_000
"""What one recorded THINKING run takes in the history (request, steps, events), measured."""
HEADLESS = r"dns:///([\w-]+)\.quarry\.svc\.cluster\.local:(\d+)"
Doc = dict[str, Any]


@cache
def rendered(overlay: str) -> tuple[Doc, ...]:
    out = subprocess.run(
        [str(KUBECTL), "kustomize", str(ROOT / "k8s" / "overlays" / overlay)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return tuple(d for d in yaml.safe_load_all(out) if d)


def _of(docs: tuple[Doc, ...], kind: str) -> list[Doc]:
    return [d for d in docs if d["kind"] == kind]


def _workloads(docs: tuple[Doc, ...]) -> list[Doc]:
    return [d for d in docs if d["kind"] in ("Deployment", "StatefulSet", "Job")]


def _quarry_workloads(docs: tuple[Doc, ...]) -> list[Doc]:
    return [d for d in _workloads(docs) if d["metadata"]["name"] in QUARRY]


def _config(docs: tuple[Doc, ...], tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    (config_map,) = _of(docs, "ConfigMap")
    text = config_map["data"]["quarry.yaml"]
    path = tmp_path / "quarry.yaml"
    path.write_text(text)
    return path, yaml.safe_load(text)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_rendered_object_validates_strictly_against_the_kubernetes_schemas(
    overlay: str,
) -> None:
    docs = rendered(overlay)
    assert len(docs) > 20
    for doc in docs:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def test_the_validator_rejects_a_misspelt_field() -> None:
    deployment = dict(_of(rendered("embedded"), "Deployment")[0])
    broken = yaml.safe_load(yaml.safe_dump(deployment).replace("readinessProbe", "readinesProbe"))
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, K8S_VERSION, strict=True)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_quarry_container_probes_liveness_and_readiness_names_on_its_health_port(
    overlay: str, tmp_path: Path
) -> None:
    """Probes go to the plaintext health-only port (`server.health_port`): the kubelet's gRPC
    probes cannot speak TLS, and the main port refuses new calls while it drains."""
    docs = rendered(overlay)
    _, config = _config(docs, tmp_path)
    workloads = _quarry_workloads(docs)
    assert {w["metadata"]["name"] for w in workloads} == set(QUARRY)
    for workload in workloads:
        _, service, section, _ = QUARRY[workload["metadata"]["name"]]
        (container,) = workload["spec"]["template"]["spec"]["containers"]
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        assert ports["grpc"] == config[section]["server"]["port"]
        assert ports["health"] == config[section]["server"]["health_port"] != ports["grpc"]
        for probe in ("startupProbe", "readinessProbe"):
            assert container[probe]["grpc"] == {"port": ports["health"], "service": service}
        liveness = {"port": ports["health"], "service": LIVENESS_SERVICE}
        assert container["livenessProbe"]["grpc"] == liveness


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_container_has_requests_a_memory_limit_and_an_exactly_pinned_image(
    overlay: str,
) -> None:
    for workload in _workloads(rendered(overlay)):
        for container in workload["spec"]["template"]["spec"]["containers"]:
            resources = container["resources"]
            assert {"cpu", "memory"} <= set(resources["requests"])
            assert "memory" in resources["limits"]
            assert PINNED_IMAGE.fullmatch(container["image"]), container["image"]


@pytest.mark.parametrize(
    "image",
    [
        "quarry",
        "quarry:latest",
        "docker.io/vespaengine/vespa:8",
        "docker.io/vespaengine/vespa:8.687",
        "registry.example.com/quarry@sha256:abc",
    ],
)
def test_the_image_rule_refuses_floating_and_malformed_references(image: str) -> None:
    assert not PINNED_IMAGE.fullmatch(image)


def _images(directory: Path) -> list[dict[str, str]]:
    """The `images:` of an overlay and of the overlays it builds on."""
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
    images = list(kustomization.get("images", []))
    for resource in kustomization.get("resources", []):
        if (directory / resource / "kustomization.yaml").is_file() and "overlays" in str(
            (directory / resource).resolve()
        ):
            images += _images((directory / resource).resolve())
    return images


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_overlay_names_every_image_it_renders_so_one_edit_pins_a_digest(
    overlay: str,
) -> None:
    entries = {e.get("newName", e["name"]): e for e in _images(ROOT / "k8s" / "overlays" / overlay)}
    for workload in _workloads(rendered(overlay)):
        for container in workload["spec"]["template"]["spec"]["containers"]:
            name, _, tag = container["image"].partition(":")
            assert name in entries, f"{name}: add it to {overlay}'s images: to pin its digest"
            assert entries[name].get("newTag") == tag or "digest" in entries[name]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_each_service_runs_from_its_own_image_and_the_vespa_job_from_the_search_tools(
    overlay: str,
) -> None:
    docs = rendered(overlay)
    for workload in _quarry_workloads(docs):
        (container,) = workload["spec"]["template"]["spec"]["containers"]
        name = container["image"].partition(":")[0]
        # the image `make image SERVICE=<workload>` builds, with what that service imports
        assert name == f"registry.example.com/quarry-{workload['metadata']['name']}"
    for job in _of(docs, "Job"):
        (container,) = job["spec"]["template"]["spec"]["containers"]
        assert container["image"].startswith("registry.example.com/quarry-search-tool:")


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_quarry_pods_run_restricted(overlay: str) -> None:
    for workload in _quarry_workloads(rendered(overlay)):
        pod = workload["spec"]["template"]["spec"]
        assert pod["automountServiceAccountToken"] is False
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        (container,) = pod["containers"]
        context = container["securityContext"]
        assert context["allowPrivilegeEscalation"] is False
        assert context["readOnlyRootFilesystem"] is True
        assert context["capabilities"] == {"drop": ["ALL"]}
        mounts = {m["mountPath"] for m in container["volumeMounts"]}
        assert "/tmp" in mounts
        accounts = {a["metadata"]["name"]: a for a in _of(rendered(overlay), "ServiceAccount")}
        assert accounts[pod["serviceAccountName"]]["automountServiceAccountToken"] is False


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_no_secret_is_written_into_the_manifests(overlay: str, tmp_path: Path) -> None:
    docs = rendered(overlay)
    assert not _of(docs, "Secret")
    text = yaml.safe_dump_all(docs)
    assert not re.search(r"\bqk_[\w-]{8,}", text), "an API key is written into the manifests"
    _, config = _config(docs, tmp_path)
    for section in ("agent", "llm_gateway", "search_tool"):
        assert not config[section]["server"]["auth"].get("keys"), "digests go in the Secret"
    for workload in _workloads(docs):
        pod = workload["spec"]["template"]["spec"]
        secret_mounts = {
            m["mountPath"]
            for c in pod["containers"]
            for m in c.get("volumeMounts", [])
            if any(v["name"] == m["name"] and "secret" in v for v in pod.get("volumes", []))
        }
        for container in pod["containers"]:
            for env in container.get("env", []):
                if env["name"].endswith("_FILE"):  # a path: it must be inside a mounted Secret
                    assert str(PurePosixPath(env["value"]).parent) in secret_mounts, env
                elif re.search(r"KEY|TOKEN|SECRET|PASSWORD", env["name"]):
                    assert "value" not in env, env["name"]
                    assert env["valueFrom"]["secretKeyRef"]["name"] in (
                        "quarry-api-keys",
                        POSTGRES_TRIAL_SECRET,
                    )
        for volume in pod.get("volumes", []):
            if "secret" in volume:
                assert volume["secret"]["secretName"] in (
                    KEY_DIGESTS_SECRET,
                    TLS_SECRET,
                    AGENT_DB_SECRET,
                    POSTGRES_SECRET,
                )
                assert "items" not in volume["secret"]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_quarry_service_reads_its_key_digests_from_the_mounted_secret(
    overlay: str, tmp_path: Path
) -> None:
    docs = rendered(overlay)
    _, config = _config(docs, tmp_path)
    for workload in _quarry_workloads(docs):
        _, _, section, _ = QUARRY[workload["metadata"]["name"]]
        auth = config[section]["server"]["auth"]
        assert auth["enabled"] is True
        keys_file = PurePosixPath(auth["keys_file"])
        pod = workload["spec"]["template"]["spec"]
        volumes = {v["name"]: v for v in pod["volumes"]}
        (container,) = pod["containers"]
        (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == str(keys_file.parent)]
        assert mount["readOnly"] is True
        secret = volumes[mount["name"]]["secret"]
        assert secret["secretName"] == KEY_DIGESTS_SECRET
        assert secret.get("optional", False) is False, "no keys file: the pod must not start"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_grace_periods_cover_prestop_plus_the_servers_drain(overlay: str, tmp_path: Path) -> None:
    _, config = _config(rendered(overlay), tmp_path)
    for workload in _quarry_workloads(rendered(overlay)):
        _, _, section, _ = QUARRY[workload["metadata"]["name"]]
        pod = workload["spec"]["template"]["spec"]
        pre_stop = pod["containers"][0]["lifecycle"]["preStop"]["sleep"]["seconds"]
        grace_s = config[section]["server"]["grace_s"]
        assert pod["terminationGracePeriodSeconds"] >= pre_stop + grace_s + MARGIN_S


def _with_a_keys_file(path: Path, config: dict[str, Any], tmp_path: Path) -> Path:
    """The rendered config, its keys file moved to `tmp_path` and holding one key digest (the
    shape `quarry keygen --name` prints), as the mounted Secret would."""
    keys_file = tmp_path / "keys.yaml"
    keys_file.write_text("- {name: billing, sha256: " + "ab" * 32 + ", read: [docs]}\n")
    mounted = config["agent"]["server"]["auth"]["keys_file"]
    path.write_text(path.read_text().replace(mounted, str(keys_file)))
    return path


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_config_map_loads_through_the_real_settings_with_auth_and_the_health_port_on(
    overlay: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("QUARRY_AGENT_GATEWAY_KEY", "from-the-secret")
    path = _with_a_keys_file(*_config(rendered(overlay), tmp_path), tmp_path)
    loaded: list[QuarrySettings] = [
        load_settings(AgentSettings, path),
        load_settings(GatewaySettings, path),
        load_settings(SearchToolSettings, path),
    ]
    for settings in loaded:
        assert settings.server.auth.enabled
        assert [k.name for k in settings.server.auth.keys] == ["billing"]
        assert settings.server.host == "0.0.0.0"
        assert settings.server.health_port == HEALTH_PORT
    search_tool = load_settings(SearchToolSettings, path)
    assert search_tool.engine.kind == ENGINE_OF.get(overlay, "embedded")
    if overlay == "vespa":
        assert search_tool.engine.vespa.url == "http://vespa.quarry.svc.cluster.local:8080"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_selectors_services_hpas_and_pdbs_all_hit_a_workload(overlay: str) -> None:
    docs = rendered(overlay)
    labels = {}
    for workload in _workloads(docs):
        template = workload["spec"]["template"]["metadata"]["labels"]
        selector = workload["spec"].get("selector", {}).get("matchLabels", {})
        assert selector.items() <= template.items()
        labels[(workload["kind"], workload["metadata"]["name"])] = template
    for service in _of(docs, "Service"):
        selector = service["spec"]["selector"].items()
        assert any(selector <= t.items() for t in labels.values()), service["metadata"]["name"]
    for pdb in _of(docs, "PodDisruptionBudget"):
        selector = pdb["spec"]["selector"]["matchLabels"].items()
        assert any(selector <= t.items() for t in labels.values())
    for hpa in _of(docs, "HorizontalPodAutoscaler"):
        target = hpa["spec"]["scaleTargetRef"]
        assert (target["kind"], target["name"]) in labels
    kinds = {name: kind for kind, name in labels}
    stateless = overlay in STATELESS_SEARCH
    assert kinds["search-tool"] == ("Deployment" if stateless else "StatefulSet")
    scaled = {h["spec"]["scaleTargetRef"]["name"] for h in _of(docs, "HorizontalPodAutoscaler")}
    assert "llm-gateway" in scaled
    assert ("search-tool" in scaled) == stateless


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_agent_reaches_its_dependencies_through_headless_services_and_network_policy(
    overlay: str, tmp_path: Path
) -> None:
    docs = rendered(overlay)
    _, config = _config(docs, tmp_path)
    services = {s["metadata"]["name"]: s for s in _of(docs, "Service")}
    (agent_policy,) = [p for p in _of(docs, "NetworkPolicy") if p["metadata"]["name"] == "agent"]
    allowed = {
        (rule["to"][0]["podSelector"]["matchLabels"]["app.kubernetes.io/name"], port["port"])
        for rule in agent_policy["spec"]["egress"]
        if "to" in rule
        for port in rule["ports"]
    }
    anywhere = [r["ports"] for r in agent_policy["spec"]["egress"] if "to" not in r]
    (agent_container,) = _agent(docs)["spec"]["template"]["spec"]["containers"]
    shared = (
        config["agent"].get("history", {}).get("kind") == "postgres"
        or _env(agent_container).get("QUARRY_AGENT_HISTORY__KIND") == "postgres"
    )
    assert anywhere == ([[{"protocol": "TCP", "port": 5432}]] if shared else []), (
        "the agent reaches any address only on PostgreSQL's port, and only with its history there"
    )
    assert config["agent"]["load_balancing"] == "round_robin"
    for key, target in (
        ("search_tool_address", "search-tool"),
        ("llm_gateway_address", "llm-gateway"),
    ):
        match = re.fullmatch(
            r"dns:///([\w-]+)\.quarry\.svc\.cluster\.local:(\d+)", config["agent"][key]
        )
        assert match, config["agent"][key]
        service = services[match[1]]
        assert service["spec"]["clusterIP"] == "None"
        assert service["metadata"]["namespace"] == "quarry"
        assert int(match[2]) in [p["port"] for p in service["spec"]["ports"]]
        assert (target, int(match[2])) in allowed
    # only the gateway reaches the internet; the postgres overlays' search tool reaches an
    # external database, on PostgreSQL's port alone
    outside = {
        p["metadata"]["name"]: {
            port["port"] for r in p["spec"]["egress"] for port in r.get("ports", [])
        }
        for p in _of(docs, "NetworkPolicy")
        if any("ipBlock" in t for r in p["spec"].get("egress", []) for t in r.get("to", []))
    }
    database = {"search-tool": {5432}} if overlay.startswith("postgres") else {}
    assert {k: v for k, v in outside.items() if k != "llm-gateway"} == {
        **database,
        "https-egress": {443},  # opted into by label only (test_https_egress_is_opened_by_label)
    }
    assert "llm-gateway" in outside


def _selects(selector: Doc, labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.get("matchLabels", {}).items())


def _allowed(
    policies: list[Doc], source: dict[str, str], target: dict[str, str], port: int
) -> bool:
    """Whether `source` pods may open `port` on `target` pods under these NetworkPolicies (same
    namespace, pod selectors only): egress allowed from the source and ingress to the target."""

    def permits(direction: str, pod: dict[str, str], peer: dict[str, str]) -> bool:
        kind = direction.capitalize()
        mine = [p["spec"] for p in policies if _selects(p["spec"]["podSelector"], pod)]
        if not any(kind in spec["policyTypes"] for spec in mine):
            return True
        peers = "to" if direction == "egress" else "from"
        return any(
            (not rule.get(peers) or any(_selects(x.get("podSelector", {}), peer)
                                         for x in rule[peers] if "podSelector" in x))
            and any(p["port"] == port for p in rule.get("ports", []))
            for spec in mine
            for rule in spec.get(direction, [])
        )  # fmt: skip

    return permits("egress", source, target) and permits("ingress", target, source)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_an_ingest_job_labelled_a_search_tool_client_reaches_the_search_tool_and_nothing_else(
    overlay: str,
) -> None:
    policies = _of(rendered(overlay), "NetworkPolicy")
    job = {"app.kubernetes.io/name": "ingest", "quarry.dev/search-tool-client": "true"}
    search_tool = {"app.kubernetes.io/name": "search-tool", "app.kubernetes.io/part-of": "quarry"}
    assert _allowed(policies, job, search_tool, 50051)
    assert not _allowed(policies, job, {"app.kubernetes.io/name": "agent"}, 50053)
    assert not _allowed(policies, job, {"app.kubernetes.io/name": "llm-gateway"}, 50052)
    unlabelled = {"app.kubernetes.io/name": "ingest"}
    assert not _allowed(policies, unlabelled, search_tool, 50051)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_https_egress_is_opened_by_label_for_the_openai_embedder_only_where_asked(
    overlay: str,
) -> None:
    docs = rendered(overlay)
    (https,) = [p for p in _of(docs, "NetworkPolicy") if p["metadata"]["name"] == "https-egress"]
    assert https["spec"]["podSelector"] == {"matchLabels": {"quarry.dev/https-egress": "true"}}
    (rule,) = https["spec"]["egress"]
    assert rule["ports"] == [{"protocol": "TCP", "port": 443}]
    assert "10.0.0.0/8" in rule["to"][0]["ipBlock"]["except"]
    for workload in _workloads(docs):
        labels = workload["spec"]["template"]["metadata"].get("labels", {})
        assert "quarry.dev/https-egress" not in labels or workload["metadata"]["name"] in (
            "llm-gateway",
            "search-tool",
        )


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_object_and_every_pod_is_labelled_part_of_quarry(overlay: str) -> None:
    docs = rendered(overlay)
    for doc in docs:
        assert doc["metadata"].get("labels", {}).get("app.kubernetes.io/part-of") == "quarry", (
            doc["kind"],
            doc["metadata"]["name"],
        )
    for workload in _workloads(docs):
        labels = workload["spec"]["template"]["metadata"]["labels"]
        assert labels["app.kubernetes.io/part-of"] == "quarry", workload["metadata"]["name"]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_each_quarry_container_starts_its_own_service_module_with_the_mounted_config(
    overlay: str,
) -> None:
    for workload in _quarry_workloads(rendered(overlay)):
        module, _, _, _ = QUARRY[workload["metadata"]["name"]]
        (container,) = workload["spec"]["template"]["spec"]["containers"]
        assert container["args"] == [module, "--config", "/etc/quarry/quarry.yaml"]


def _quarry_image_pods(docs: tuple[Doc, ...]) -> list[tuple[str, Doc]]:
    return [
        (w["metadata"]["name"], w["spec"]["template"]["spec"])
        for w in _workloads(docs)
        if all(
            re.search(r"/quarry-[a-z-]+:", c["image"])
            for c in w["spec"]["template"]["spec"]["containers"]
        )
    ]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_pod_of_the_quarry_image_runs_restricted_with_its_own_tokenless_account(
    overlay: str,
) -> None:
    docs = rendered(overlay)
    accounts = {a["metadata"]["name"]: a for a in _of(docs, "ServiceAccount")}
    pods = _quarry_image_pods(docs)
    assert len(pods) == len(QUARRY) + (overlay == "vespa")
    for name, pod in pods:
        assert pod["serviceAccountName"] == name
        assert accounts[name]["automountServiceAccountToken"] is False
        assert pod["automountServiceAccountToken"] is False
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["runAsUser"] >= 1000
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        for container in pod["containers"]:
            context = container["securityContext"]
            assert context["allowPrivilegeEscalation"] is False
            assert context["readOnlyRootFilesystem"] is True
            assert context["capabilities"] == {"drop": ["ALL"]}


def test_the_vespa_deploy_job_deploys_quarrys_package_to_the_config_server_pod() -> None:
    docs = rendered("vespa")
    (job,) = _of(docs, "Job")
    spec = job["spec"]
    assert 1 <= spec["backoffLimit"] <= 10
    assert spec["activeDeadlineSeconds"] > 0
    pod = spec["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    (container,) = pod["containers"]
    args = container["args"]
    assert args[0] == "quarry_cli.vespa_deploy", "the image's `python -m` entry runs it"
    assert importlib.util.find_spec(args[0]) is not None
    # a rejected package (exit 3) fails the Job at once instead of retrying
    (rule,) = spec["podFailurePolicy"]["rules"]
    assert rule["action"] == "FailJob"
    assert rule["onExitCodes"] == {"containerName": "deploy", "operator": "In", "values": [3]}
    assert EXIT_REJECTED == 3
    # the config server is reached through the pod's own DNS name, before the pod is Ready
    url = urlsplit(args[args.index("--config-server") + 1])
    pod_name, service_name, namespace = (url.hostname or "").split(".")[:3]
    services = {s["metadata"]["name"]: s for s in _of(docs, "Service")}
    headless = services[service_name]
    assert headless["spec"]["clusterIP"] == "None"
    assert headless["spec"]["publishNotReadyAddresses"] is True
    assert namespace == job["metadata"]["namespace"]
    (vespa,) = [s for s in _of(docs, "StatefulSet") if s["metadata"]["name"] == "vespa"]
    assert pod_name == "vespa-0"
    assert vespa["spec"]["serviceName"] == service_name
    assert url.port in [p["port"] for p in headless["spec"]["ports"]]
    (vespa_container,) = vespa["spec"]["template"]["spec"]["containers"]
    assert url.port in [p["containerPort"] for p in vespa_container["ports"]]
    policies = {p["metadata"]["name"]: p["spec"] for p in _of(docs, "NetworkPolicy")}
    assert {
        "to": [{"podSelector": {"matchLabels": {"app.kubernetes.io/name": "vespa"}}}],
        "ports": [{"protocol": "TCP", "port": url.port}],
    } in policies["vespa-deploy-app"]["egress"]
    assert {
        "from": [{"podSelector": {"matchLabels": {"app.kubernetes.io/name": "vespa-deploy-app"}}}],
        "ports": [{"protocol": "TCP", "port": url.port}],
    } in policies["vespa"]["ingress"]


def _env(container: Doc) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_tls_is_on_exactly_where_the_tls_component_is_and_services_say_so(
    overlay: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """embedded-tls: every server speaks TLS, the search tool and the gateway require client
    certificates (mTLS), the agent's channels verify and present one; plaintext overlays declare
    `h2c` on their Services, TLS ones do not."""
    docs = rendered(overlay)
    tls_on = overlay == "embedded-tls"
    path = _config(docs, tmp_path)[0]
    keys = tmp_path / "keys.yaml"
    keys.write_text("")
    path.write_text(path.read_text().replace("/etc/quarry-keys/keys.yaml", str(keys)))
    monkeypatch.setenv("QUARRY_AGENT_GATEWAY_KEY", "from-the-secret")
    for workload in _quarry_workloads(docs):
        _, _, _, settings_cls = QUARRY[workload["metadata"]["name"]]
        (container,) = workload["spec"]["template"]["spec"]["containers"]
        with monkeypatch.context() as env:
            for name, value in _env(container).items():
                env.setenv(name, value)
            settings = load_settings(settings_cls, path)
        assert settings.server.tls.enabled is tls_on
        mutual = settings.server.tls.client_ca_file is not None
        assert mutual is (tls_on and workload["metadata"]["name"] != "agent")
        if isinstance(settings, AgentSettings):
            for channel in (settings.search_tool_tls, settings.llm_gateway_tls):
                assert channel.enabled is tls_on
                assert (channel.cert_file is not None) is tls_on
    for service in _of(docs, "Service"):
        if service["metadata"]["name"].removesuffix("-headless") in QUARRY:
            declared = {p.get("appProtocol") for p in service["spec"]["ports"]}
            assert declared == ({None} if tls_on else {"kubernetes.io/h2c"})


def _agent(docs: tuple[Doc, ...]) -> Doc:
    (agent,) = [w for w in _workloads(docs) if w["metadata"]["name"] == "agent"]
    return agent


def _agent_history(
    docs: tuple[Doc, ...], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> HistorySettings:
    """The agent's history settings as its pod loads them (ConfigMap + the container's env)."""
    path = _with_a_keys_file(*_config(docs, tmp_path), tmp_path)
    (container,) = _agent(docs)["spec"]["template"]["spec"]["containers"]
    monkeypatch.setenv("QUARRY_AGENT_GATEWAY_KEY", "from-the-secret")
    monkeypatch.delenv("QUARRY_AGENT_HISTORY__PATH")  # the tests' own (tests/conftest.py)
    for name, value in _env(container).items():
        monkeypatch.setenv(name, value)
    return load_settings(AgentSettings, path).history


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_agents_history_is_sqlite_on_a_volume_with_one_replica_or_postgres_with_many(
    overlay: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SQLite has one writer and lives in one pod: one replica, no HPA, `Recreate` (the old pod
    lets go of the ReadWriteOnce volume first), the file on a PersistentVolumeClaim sized for
    `max_runs` runs (never the pod's /tmp emptyDir, which fills and goes with the pod).
    PostgreSQL is shared: several replicas with an HPA and a rolling update, no history volume,
    the DSN from a mounted Secret file, each replica named after its pod."""
    docs = rendered(overlay)
    history = _agent_history(docs, tmp_path, monkeypatch)
    agent = _agent(docs)
    pod = agent["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    scaled = {h["spec"]["scaleTargetRef"]["name"] for h in _of(docs, "HorizontalPodAutoscaler")}
    assert history.enabled
    assert not [v for v in volumes.values() if "emptyDir" in v and v["name"] != "tmp"]
    if history.kind == "postgres":
        assert agent["spec"]["replicas"] >= 2
        assert "agent" in scaled
        assert agent["spec"]["strategy"]["type"] == "RollingUpdate"
        assert not _of(docs, "PersistentVolumeClaim")
        dsn_file = history.postgres.dsn_file
        assert dsn_file is not None
        secret = volumes[mounts[str(dsn_file.parent)]]["secret"]
        assert secret["secretName"] == AGENT_DB_SECRET
        (replica,) = [e for e in container["env"] if e["name"].endswith("REPLICA__NAME")]
        assert replica["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
        return
    assert agent["spec"]["replicas"] == 1
    assert "agent" not in scaled
    assert agent["spec"]["strategy"] == {"type": "Recreate"}
    assert history.path.is_absolute()
    volume = volumes[mounts[str(history.path.parent)]]
    claim_name = volume["persistentVolumeClaim"]["claimName"]
    (claim,) = [
        c for c in _of(docs, "PersistentVolumeClaim") if c["metadata"]["name"] == claim_name
    ]
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    size = claim["spec"]["resources"]["requests"]["storage"]
    assert size.endswith("Gi")
    assert history.max_runs > 0
    assert history.max_runs * RUN_BYTES * 2 <= int(size[:-2]) * 2**30


def test_the_optional_agent_route_exposes_only_the_agent_over_tls_through_a_gateway(
    tmp_path: Path,
) -> None:
    """k8s/components/agent-grpc-route added to the embedded overlay (as k8s/README.md says)."""
    import shutil

    k8s = tmp_path / "k8s"
    shutil.copytree(ROOT / "k8s", k8s, ignore=shutil.ignore_patterns("rendered"))
    overlay = k8s / "overlays" / "embedded" / "kustomization.yaml"
    overlay.write_text(overlay.read_text() + "components: [../../components/agent-grpc-route]\n")
    out = subprocess.run(
        [str(KUBECTL), "kustomize", str(overlay.parent)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    docs = tuple(d for d in yaml.safe_load_all(out) if d)
    (gateway,) = _of(docs, "Gateway")
    (route,) = _of(docs, "GRPCRoute")
    for doc in (gateway, route):
        assert doc["apiVersion"] == "gateway.networking.k8s.io/v1"
        assert doc["metadata"]["namespace"] == "quarry"
        assert doc["metadata"]["labels"]["app.kubernetes.io/part-of"] == "quarry"
    (listener,) = gateway["spec"]["listeners"]
    assert (listener["protocol"], listener["port"], listener["tls"]["mode"]) == (
        "HTTPS",
        443,
        "Terminate",
    )
    (parent,) = route["spec"]["parentRefs"]
    assert (parent["name"], parent["sectionName"]) == (
        gateway["metadata"]["name"],
        listener["name"],
    )
    (rule,) = route["spec"]["rules"]
    services = {m["method"]["service"] for m in rule["matches"]}
    assert "quarry.agent.v1.AgentService" in services
    assert not any("searchtool" in s or "llmgateway" in s for s in services)
    (backend,) = rule["backendRefs"]
    agent_service = next(
        s for s in _of(docs, "Service") if s["metadata"]["name"] == backend["name"]
    )
    assert agent_service["spec"]["selector"] == {"app.kubernetes.io/name": "agent"}
    assert backend["port"] in [p["port"] for p in agent_service["spec"]["ports"]]
    assert "clusterIP" not in agent_service["spec"]  # the balanced Service, not the headless one
    (agent_policy,) = [p for p in _of(docs, "NetworkPolicy") if p["metadata"]["name"] == "agent"]
    assert any(
        "from" not in rule and backend["port"] in [p["port"] for p in rule["ports"]]
        for rule in agent_policy["spec"]["ingress"]
    )  # the gateway's data plane, in its own namespace, may reach the agent


def _certificate_dns_names() -> set[str]:
    """The DNS names of the `quarry-tls` Certificate k8s/README.md ("TLS") tells to create."""
    text = (ROOT / "k8s" / "README.md").read_text()
    block = text.split("kind: Certificate", 1)[1].split("```", 1)[0]
    certificate = yaml.safe_load("kind: Certificate" + block)
    return set(certificate["spec"]["dnsNames"])


def test_with_in_cluster_tls_the_gateway_verifies_the_agents_certificate(tmp_path: Path) -> None:
    """embedded-tls + agent-grpc-route + agent-grpc-route-tls (as k8s/README.md says): the
    BackendTLSPolicy names the Service and port the route sends to, the CA of `quarry-tls` (as
    the ConfigMap Gateway API reads) and a name the certificate carries; the agent asks no
    client certificate (a BackendTLSPolicy cannot present one)."""
    import shutil

    k8s = tmp_path / "k8s"
    shutil.copytree(ROOT / "k8s", k8s, ignore=shutil.ignore_patterns("rendered"))
    overlay = k8s / "overlays" / "embedded-tls" / "kustomization.yaml"
    spec = yaml.safe_load(overlay.read_text())
    spec["components"] += [
        "../../components/agent-grpc-route",
        "../../components/agent-grpc-route-tls",
    ]
    overlay.write_text(yaml.safe_dump(spec))
    out = subprocess.run(
        [str(KUBECTL), "kustomize", str(overlay.parent)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    docs = tuple(d for d in yaml.safe_load_all(out) if d)
    (policy,) = _of(docs, "BackendTLSPolicy")
    (route,) = _of(docs, "GRPCRoute")
    assert policy["apiVersion"] == "gateway.networking.k8s.io/v1"
    assert policy["metadata"]["labels"]["app.kubernetes.io/part-of"] == "quarry"
    (backend,) = route["spec"]["rules"][0]["backendRefs"]
    service = next(s for s in _of(docs, "Service") if s["metadata"]["name"] == backend["name"])
    (target,) = policy["spec"]["targetRefs"]
    assert (target["group"], target["kind"], target["name"]) == ("", "Service", backend["name"])
    port = next(p for p in service["spec"]["ports"] if p["port"] == backend["port"])
    assert target["sectionName"] == port["name"]
    # a policy applies only in its Service's namespace
    assert policy["metadata"]["namespace"] == service["metadata"]["namespace"] == "quarry"
    assert route["metadata"]["namespace"] == "quarry"
    validation = policy["spec"]["validation"]
    (ca,) = validation["caCertificateRefs"]
    assert (ca["group"], ca["kind"], ca["name"]) == ("", "ConfigMap", "quarry-tls-ca")
    readme = (ROOT / "k8s" / "README.md").read_text()
    assert "kubectl -n quarry create configmap quarry-tls-ca" in readme
    assert validation["hostname"] in _certificate_dns_names()
    assert validation["hostname"].split(".")[:2] == [backend["name"], "quarry"]
    # the agent serves TLS (so the route needs the policy) and asks callers for no certificate
    (agent,) = [w for w in _workloads(docs) if w["metadata"]["name"] == "agent"]
    env = {e["name"] for e in agent["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert "QUARRY_AGENT_SERVER__TLS__CERT_FILE" in env
    assert not any(name.startswith("QUARRY_AGENT_SERVER__TLS__CLIENT_CA") for name in env)
    # and no TLS component -> no policy: the plaintext agent is reached as before
    assert "quarry-tls" not in yaml.safe_dump(rendered("embedded"))


def test_vespa_is_ready_when_its_query_container_is_and_keeps_its_logs_on_its_volume() -> None:
    (vespa,) = [w for w in _workloads(rendered("vespa")) if w["metadata"]["name"] == "vespa"]
    (container,) = vespa["spec"]["template"]["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    readiness = container["readinessProbe"]["httpGet"]
    assert (readiness["path"], ports[readiness["port"]]) == ("/state/v1/health", 8080)
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    claims = {c["metadata"]["name"] for c in vespa["spec"]["volumeClaimTemplates"]}
    assert mounts["/opt/vespa/logs"]["name"] in claims
    internal = next(
        s for s in _of(rendered("vespa"), "Service") if s["metadata"]["name"] == "vespa-internal"
    )
    assert internal["spec"]["publishNotReadyAddresses"] is True  # the deploy Job's way in


@pytest.mark.parametrize("overlay", ["postgres", "postgres-trial"])
def test_the_postgres_search_tool_reads_its_dsn_from_the_secret_and_may_reach_the_database(
    overlay: str, tmp_path: Path
) -> None:
    docs = rendered(overlay)
    _, config = _config(docs, tmp_path)
    engine = config["search_tool"]["engine"]
    assert engine["kind"] == "postgres"
    assert "dsn" not in engine["postgres"], "the DSN (and its password) stays in the Secret"
    (search_tool,) = [w for w in _workloads(docs) if w["metadata"]["name"] == "search-tool"]
    pod = search_tool["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    (container,) = pod["containers"]
    mounts = {
        m["mountPath"]: volumes[m["name"]]
        for m in container["volumeMounts"]
        if "secret" in volumes[m["name"]]
    }
    dsn_dir = str(PurePosixPath(engine["postgres"]["dsn_file"]).parent)
    assert mounts[dsn_dir]["secret"]["secretName"] == POSTGRES_SECRET
    policies = {p["metadata"]["name"]: p["spec"] for p in _of(docs, "NetworkPolicy")}
    egress_ports = {
        port["port"] for rule in policies["search-tool"]["egress"] for port in rule["ports"]
    }
    assert 5432 in egress_ports
    if overlay == "postgres":
        assert engine["postgres"]["sslmode"] == "verify-full"
        ca_dir = str(PurePosixPath(engine["postgres"]["ca_file"]).parent)
        assert mounts[ca_dir]["secret"]["secretName"] == POSTGRES_SECRET
    else:
        (database,) = [w for w in _workloads(docs) if w["metadata"]["name"] == "postgres"]
        assert database["kind"] == "StatefulSet"
        assert database["spec"]["replicas"] == 1
        # the search tool, and the agent whose history and questions live there too
        assert policies["postgres"]["ingress"] == [
            {
                "from": [
                    {"podSelector": {"matchLabels": {"app.kubernetes.io/name": "search-tool"}}},
                    {"podSelector": {"matchLabels": {"app.kubernetes.io/name": "agent"}}},
                ],
                "ports": [{"protocol": "TCP", "port": 5432}],
            }
        ]
