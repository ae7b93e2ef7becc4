"""Render the Vespa application package (`services/search_tool/engine/vespa/package.py`) to files.

Usage: gen_vespa_app.py [--out DIR] [--dimensions N] [--topology FILE] [--zip FILE]
  --out        where the package goes (default services/search_tool/vespa/app, checked in)
  --dimensions embedding size the package is rendered for (default 384, all-MiniLM-L6-v2)
  --topology   a topology file (`engine/vespa/topology.py`): a multi-node self-hosted Vespa
               (services.xml + hosts.xml) or Vespa Cloud (services.xml + deployment.xml +
               security/clients.pem); without it, the single-node package
  --zip        also write the package as a zip for `vespa deploy` / prepareandactivate

Examples: services/search_tool/vespa/topologies/*.yaml (their renderings are golden-tested).
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import zipfile
from pathlib import Path

from services.search_tool.engine.vespa.package import DEFAULT_DIMENSIONS, application_package
from services.search_tool.engine.vespa.topology import (
    Cloud,
    SelfHosted,
    load_topology,
    render_topology,
)

ROOT = Path(__file__).resolve().parent.parent
CHECKED_IN = ROOT / "services" / "search_tool" / "vespa" / "app"


def render(
    out_dir: Path,
    dimensions: int = DEFAULT_DIMENSIONS,
    topology: SelfHosted | Cloud | None = None,
) -> list[Path]:
    """Write the package under `out_dir` (replacing it), laid out for `topology` when given;
    returns the files, relative, sorted."""
    if out_dir.exists():
        shutil.rmtree(out_dir)
    with tempfile.TemporaryDirectory() as scratch:
        application_package(dimensions).to_files(Path(scratch))
        files = sorted(p.relative_to(scratch) for p in Path(scratch).rglob("*") if p.is_file())
        for relative in files:  # pyvespa also makes empty files/ and models/: git keeps no dirs
            target = out_dir / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(Path(scratch) / relative, target)
    if topology is not None:
        files = sorted({*files, *render_topology(topology, out_dir)})
    return files


def zip_package(package_dir: Path, zip_path: Path) -> None:
    """`package_dir`'s files at the root of a zip, as the config server expects."""
    zip_path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(zip_path, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(p for p in package_dir.rglob("*") if p.is_file()):
            archive.write(path, path.relative_to(package_dir).as_posix())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=CHECKED_IN)
    parser.add_argument("--dimensions", type=int, default=DEFAULT_DIMENSIONS)
    parser.add_argument("--topology", type=Path, default=None)
    parser.add_argument("--zip", type=Path, default=None)
    args = parser.parse_args()
    topology = load_topology(args.topology) if args.topology is not None else None
    files = render(args.out, args.dimensions, topology)
    print(f"wrote {len(files)} files under {args.out}")
    if args.zip is not None:
        zip_package(args.out, args.zip)
        print(f"wrote {args.zip}")


if __name__ == "__main__":
    main()
