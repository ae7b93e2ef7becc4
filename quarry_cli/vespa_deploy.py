"""Deploy Quarry's Vespa application package to a Vespa config server (the k8s deploy Job).

    python -m quarry_cli.vespa_deploy --config-server http://vespa-0.vespa-internal:19071
        [--package DIR] [--wait-s 300] [--poll-s 2]

The calls are Vespa's documented deploy API v2, the ones `vespa deploy` makes on a self-managed
Vespa: wait until the config server's `/state/v1/health` is `up`, then POST the package as a
zip (files at the root) to `/application/v2/tenant/default/prepareandactivate`. Running it
again is safe: an unchanged package is activated as a new session with the same content, and
Vespa changes nothing. The package defaults to the one installed with Quarry
(`services/search_tool/vespa/app`, rendered by `make vespa-package`).

Like `vespa deploy`, it returns once the config server has validated and activated the package;
the nodes apply it afterwards (the search tool's readiness waits for its engine).

Exit status: 0 deployed; 1 the config server did not come up or kept failing until `--wait-s`
ran out (a Job retries); 3 Vespa rejected the package (4xx: retrying cannot help, the k8s Job's
podFailurePolicy fails at once).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import io
import sys
import time
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx

DEPLOY_PATH = "/application/v2/tenant/default/prepareandactivate"
HEALTH_PATH = "/state/v1/health"
EXIT_DEPLOYED, EXIT_NOT_UP, EXIT_REJECTED = 0, 1, 3
_REQUEST_TIMEOUT = httpx.Timeout(120.0, connect=5.0)
"""Preparing a package can take a while on a busy config server; connecting must not."""


def installed_package() -> Path:
    """The application package installed with Quarry (`services/search_tool/vespa/app`)."""
    spec = importlib.util.find_spec("services.search_tool")
    if spec is None or spec.origin is None:
        raise FileNotFoundError("services.search_tool is not installed")
    return Path(spec.origin).parent / "vespa" / "app"


def zip_package(package: Path) -> bytes:
    """`package`'s files at the root of a zip, as the config server expects."""
    if not (package / "services.xml").is_file():
        raise FileNotFoundError(f"{package} is not a Vespa application package (no services.xml)")
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(p for p in package.rglob("*") if p.is_file()):
            archive.write(path, path.relative_to(package).as_posix())
    return buffer.getvalue()


class PackageRejected(Exception):
    """The config server refused the package (HTTP 4xx): deploying it again cannot help."""


class ConfigServerNotReady(Exception):
    """The config server was not up, or kept failing, until the wait ran out."""


@dataclass(frozen=True)
class Deployed:
    """What the config server answered to a successful deployment."""

    session_id: str
    message: str


async def deploy(
    config_server: str,
    package_zip: bytes,
    *,
    wait_s: float = 300.0,
    poll_s: float = 2.0,
    client: httpx.AsyncClient | None = None,
) -> Deployed:
    """Wait for the config server, then prepare and activate `package_zip` on it."""
    base = config_server.rstrip("/")
    deadline = time.monotonic() + wait_s
    async with client or httpx.AsyncClient(timeout=_REQUEST_TIMEOUT) as http:
        last = await _wait_until_up(http, base, deadline, poll_s)
        while True:
            try:
                response = await http.post(
                    base + DEPLOY_PATH,
                    content=package_zip,
                    headers={"Content-Type": "application/zip"},
                )
            except httpx.TransportError as error:
                last = f"{type(error).__name__}: {error}"
            else:
                if response.status_code == httpx.codes.OK:
                    body = _json(response)
                    return Deployed(str(body.get("session-id", "")), str(body.get("message", "")))
                if 400 <= response.status_code < 500:
                    raise PackageRejected(_vespa_error(response))
                last = _vespa_error(response)
            if time.monotonic() >= deadline:
                raise ConfigServerNotReady(f"deploying to {base} kept failing: {last}")
            print(f"deploy failed ({last}); retrying", file=sys.stderr)
            await asyncio.sleep(poll_s)
    raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises


async def _wait_until_up(http: httpx.AsyncClient, base: str, deadline: float, poll_s: float) -> str:
    last = "no answer yet"
    while True:
        try:
            response = await http.get(base + HEALTH_PATH)
            status = _json(response).get("status", {})
            code = status.get("code") if isinstance(status, dict) else None
            if response.status_code == httpx.codes.OK and code == "up":
                return "up"
            last = f"HTTP {response.status_code}, status {code!r}"
        except httpx.TransportError as error:
            last = f"{type(error).__name__}: {error}"
        if time.monotonic() >= deadline:
            raise ConfigServerNotReady(f"the config server at {base} is not up: {last}")
        print(f"waiting for the config server at {base} ({last})", file=sys.stderr)
        await asyncio.sleep(poll_s)


def _json(response: httpx.Response) -> dict[str, object]:
    try:
        body = response.json()
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def _vespa_error(response: httpx.Response) -> str:
    """Vespa's `error-code: message`, else the start of the body."""
    body = _json(response)
    if "message" in body:
        return f"HTTP {response.status_code} {body.get('error-code', '')}: {body['message']}"
    return f"HTTP {response.status_code}: {response.text[:500]}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m quarry_cli.vespa_deploy", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--config-server", required=True, help="e.g. http://vespa:19071")
    parser.add_argument("--package", type=Path, help="package directory (default: installed)")
    parser.add_argument("--wait-s", type=float, default=300.0, help="default %(default)s")
    parser.add_argument("--poll-s", type=float, default=2.0, help="default %(default)s")
    args = parser.parse_args(argv)
    package = args.package or installed_package()
    try:
        package_zip = zip_package(package)
        deployed = asyncio.run(
            deploy(args.config_server, package_zip, wait_s=args.wait_s, poll_s=args.poll_s)
        )
    except FileNotFoundError as error:
        print(f"vespa_deploy: {error}", file=sys.stderr)
        return EXIT_REJECTED
    except PackageRejected as error:
        print(f"vespa_deploy: Vespa rejected the package {package}: {error}", file=sys.stderr)
        return EXIT_REJECTED
    except ConfigServerNotReady as error:
        print(f"vespa_deploy: {error}", file=sys.stderr)
        return EXIT_NOT_UP
    print(f"deployed {package} to {args.config_server}: session {deployed.session_id}")
    if deployed.message:
        print(deployed.message)
    return EXIT_DEPLOYED


if __name__ == "__main__":
    sys.exit(main())
