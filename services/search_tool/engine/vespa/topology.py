"""Where the application package runs: the `services.xml` (and `hosts.xml` or `deployment.xml`)
of a multi-node self-hosted Vespa or of Vespa Cloud, rendered from a topology file.

The schemas and query profile are the same for every topology (`package.application_package`);
only the node layout differs. Three shapes:

* single node (no topology file): one container cluster with search, document-api and document
  processing, one content node, redundancy 1 — what pyvespa renders, for development;
* `self-hosted`: three (or five) config servers with cluster controllers and slobroks on them
  (`en/operations/self-managed/multinode-systems.html`), a `feed` container cluster (document-api,
  document-processing) and a `query` container cluster (search) on their own hosts, and the
  `quarry_content` cluster in groups, each group a full copy of the corpus
  (`<group><distribution partitions="1|…|*"/>`, `en/operations/self-managed/sizing-examples.html`),
  `min-redundancy` copies in all; `hosts.xml` maps each host name to its alias;
* `cloud`: Vespa Cloud (`en/reference/applications/services/services.html`: `<nodes count
  groups><resources/>`; `deployment.xml` with the production regions; the data plane secured by
  mTLS with the client certificates in `security/clients.pem`, `<clients><client
  permissions="read,write"><certificate file=…/>`).

The search tool sends queries to the query cluster and document writes to the feed cluster
(`engine.vespa.url` and `engine.vespa.feed_url`). Only a config server or Vespa Cloud can judge
that a rendered package deploys; the golden tests prove what is rendered.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Annotated, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

from services.search_tool.engine.vespa.package import CHUNK, COLLECTION, CONTENT_CLUSTER

FEED_CLUSTER = "feed"
QUERY_CLUSTER = "query"
CLIENTS_PEM = "security/clients.pem"
_DOCUMENTS = (CHUNK, COLLECTION)


class SelfHosted(BaseModel):
    """A self-managed multi-node Vespa: every host by its name (DNS, e.g. a StatefulSet pod's)."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["self-hosted"]
    config_servers: list[str] = Field(min_length=1)
    """Config servers (a ZooKeeper quorum: 1 for tests, 3 or 5 in production); cluster
    controllers and slobroks run on them too."""
    feed_containers: list[str] = Field(min_length=1)
    """Hosts of the `feed` container cluster (document/v1 and document processing)."""
    query_containers: list[str] = Field(min_length=1)
    """Hosts of the `query` container cluster (search)."""
    content_groups: list[list[str]] = Field(min_length=1)
    """Content nodes, one list per group; every group holds a full copy of the corpus."""
    min_redundancy: int = Field(default=2, ge=1)
    """Copies of each document in all (at least one per group)."""

    @model_validator(mode="after")
    def _sound(self) -> SelfHosted:
        if len(self.config_servers) % 2 == 0:
            raise ValueError("config_servers: a ZooKeeper quorum needs an odd number (1, 3, 5)")
        if any(not group for group in self.content_groups):
            raise ValueError("content_groups: every group needs at least one node")
        if self.min_redundancy < len(self.content_groups):
            raise ValueError("min_redundancy: at least one copy per content group")
        hosts = self.hosts()
        if len(set(hosts)) != len(hosts):
            raise ValueError("a host appears in two roles; give each role its own hosts")
        return self

    def hosts(self) -> list[str]:
        """Every host, in alias order."""
        return [
            *self.config_servers,
            *self.feed_containers,
            *self.query_containers,
            *(host for group in self.content_groups for host in group),
        ]


class Resources(BaseModel):
    """One Vespa Cloud node's resources (`<resources vcpu memory disk>`)."""

    model_config = ConfigDict(extra="forbid")

    vcpu: float = Field(gt=0)
    memory_gb: int = Field(gt=0)
    disk_gb: int = Field(gt=0)


class Cloud(BaseModel):
    """A Vespa Cloud application: node counts and resources per cluster, production regions, the
    data-plane client certificates."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["cloud"]
    regions: list[str] = Field(min_length=1)
    """Production zones, e.g. `aws-us-east-1c` (`deployment.xml`)."""
    feed_nodes: int = Field(default=2, ge=1)
    query_nodes: int = Field(default=2, ge=1)
    container_resources: Resources
    content_nodes: int = Field(ge=1)
    content_groups: int = Field(default=1, ge=1)
    min_redundancy: int = Field(default=2, ge=1)
    content_resources: Resources
    clients_pem: Path
    """PEM file with the certificates the search tool presents (`vespa auth cert`); copied into
    the package as `security/clients.pem`."""

    @model_validator(mode="after")
    def _sound(self) -> Cloud:
        if self.content_nodes % self.content_groups:
            raise ValueError("content_nodes: the same number of nodes in every group")
        if self.min_redundancy < self.content_groups:
            raise ValueError("min_redundancy: at least one copy per content group")
        return self


class Topology(BaseModel):
    """The file `gen_vespa_app.py --topology` reads."""

    model_config = ConfigDict(extra="forbid")

    topology: Annotated[SelfHosted | Cloud, Field(discriminator="kind")]


def load_topology(path: Path) -> SelfHosted | Cloud:
    """The topology in a YAML file; a relative `clients_pem` is relative to that file."""
    loaded = Topology.model_validate(yaml.safe_load(path.read_text(encoding="utf-8"))).topology
    if isinstance(loaded, Cloud) and not loaded.clients_pem.is_absolute():
        loaded = loaded.model_copy(update={"clients_pem": path.parent / loaded.clients_pem})
    return loaded


def render_topology(topology: SelfHosted | Cloud, out_dir: Path) -> list[Path]:
    """Write the topology's files into a rendered package (`services.xml` replaced); returns
    them, relative to `out_dir`."""
    files: dict[str, str] = {"services.xml": services_xml(topology)}
    if isinstance(topology, SelfHosted):
        files["hosts.xml"] = hosts_xml(topology)
    else:
        files["deployment.xml"] = deployment_xml(topology)
        files[CLIENTS_PEM] = topology.clients_pem.read_text(encoding="utf-8")
    for name, text in files.items():
        target = out_dir / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    return sorted(Path(name) for name in files)


def services_xml(topology: SelfHosted | Cloud) -> str:
    services = ET.Element("services", version="1.0")
    if isinstance(topology, SelfHosted):
        _self_hosted(services, topology)
    else:
        _cloud(services, topology)
    return _text(services)


def hosts_xml(topology: SelfHosted) -> str:
    hosts = ET.Element("hosts")
    for alias, name in zip(_aliases(topology), topology.hosts(), strict=True):
        host = ET.SubElement(hosts, "host", name=name)
        ET.SubElement(host, "alias").text = alias
    return _text(hosts)


def deployment_xml(topology: Cloud) -> str:
    deployment = ET.Element("deployment", version="1.0")
    prod = ET.SubElement(deployment, "prod")
    for region in topology.regions:
        ET.SubElement(prod, "region").text = region
    return _text(deployment)


def _aliases(topology: SelfHosted) -> list[str]:
    return [f"node{i}" for i in range(len(topology.hosts()))]


def _self_hosted(services: ET.Element, topology: SelfHosted) -> None:
    alias = dict(zip(topology.hosts(), _aliases(topology), strict=True))
    admin = ET.SubElement(services, "admin", version="2.0")
    for role, child in (
        ("configservers", "configserver"),
        ("cluster-controllers", "cluster-controller"),
        ("slobroks", "slobrok"),
    ):
        element = ET.SubElement(admin, role)
        for host in topology.config_servers:
            ET.SubElement(element, child, hostalias=alias[host])
    ET.SubElement(admin, "adminserver", hostalias=alias[topology.config_servers[0]])
    feed = _container(services, FEED_CLUSTER, ("document-api", "document-processing"))
    nodes = ET.SubElement(feed, "nodes")
    for host in topology.feed_containers:
        ET.SubElement(nodes, "node", hostalias=alias[host])
    query = _container(services, QUERY_CLUSTER, ("search",))
    nodes = ET.SubElement(query, "nodes")
    for host in topology.query_containers:
        ET.SubElement(nodes, "node", hostalias=alias[host])
    content = _content(services, topology.min_redundancy)
    if len(topology.content_groups) == 1:  # one group: a flat node list
        nodes = ET.SubElement(content, "nodes")
        for key, host in enumerate(topology.content_groups[0]):
            ET.SubElement(nodes, "node", {"hostalias": alias[host], "distribution-key": str(key)})
        return
    top = ET.SubElement(content, "group")
    # one full copy per group: "1|1|*" for three groups
    partitions = "1|" * (len(topology.content_groups) - 1) + "*"
    ET.SubElement(top, "distribution", partitions=partitions)
    key = 0
    for number, hosts in enumerate(topology.content_groups):
        group = ET.SubElement(
            top, "group", {"name": f"group{number}", "distribution-key": str(number)}
        )
        for host in hosts:
            ET.SubElement(group, "node", {"hostalias": alias[host], "distribution-key": str(key)})
            key += 1


def _cloud(services: ET.Element, topology: Cloud) -> None:
    for name, features, count, permissions in (
        (FEED_CLUSTER, ("document-api", "document-processing"), topology.feed_nodes, "read,write"),
        (QUERY_CLUSTER, ("search",), topology.query_nodes, "read"),
    ):
        container = _container(services, name, features)
        clients = ET.SubElement(container, "clients")
        client = ET.SubElement(clients, "client", id="mtls", permissions=permissions)
        ET.SubElement(client, "certificate", file=CLIENTS_PEM)
        nodes = ET.SubElement(container, "nodes", count=str(count))
        _resources(nodes, topology.container_resources)
    content = _content(services, topology.min_redundancy)
    nodes = ET.SubElement(
        content, "nodes", count=str(topology.content_nodes), groups=str(topology.content_groups)
    )
    _resources(nodes, topology.content_resources)


def _container(services: ET.Element, name: str, features: tuple[str, ...]) -> ET.Element:
    container = ET.SubElement(services, "container", id=name, version="1.0")
    for feature in features:
        ET.SubElement(container, feature)
    return container


def _content(services: ET.Element, min_redundancy: int) -> ET.Element:
    content = ET.SubElement(services, "content", id=CONTENT_CLUSTER, version="1.0")
    ET.SubElement(content, "min-redundancy").text = str(min_redundancy)
    documents = ET.SubElement(content, "documents")
    for document in _DOCUMENTS:
        ET.SubElement(documents, "document", type=document, mode="index")
    ET.SubElement(documents, "document-processing", cluster=FEED_CLUSTER)
    return content


def _resources(nodes: ET.Element, resources: Resources) -> None:
    ET.SubElement(
        nodes,
        "resources",
        vcpu=f"{resources.vcpu:g}",
        memory=f"{resources.memory_gb}Gb",
        disk=f"{resources.disk_gb}Gb",
    )


def _text(root: ET.Element) -> str:
    ET.indent(root, space="    ")
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, "unicode") + "\n"
