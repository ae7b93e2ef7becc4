"""Each collection's calibrated fusion: kept beside the collection, measured in the background.

`FusionCalibrations.fusion_for` is what a HYBRID search fuses with: the collection's calibration
when it has one for the configured fusion and embedding model, else the configured fusion. A
search of a collection without one (or whose chunk count moved by more than
`RECALIBRATE_CHANGE` since) schedules a calibration in the background — one at a time, never
while a client says more documents of a build follow, at most one check per collection every
`CHECK_EVERY_S` — and the searches after it use it. Calibrations are stored as JSON under
`<data_dir>/.fusion-calibration/<collection>.json`, so a restarted search tool does not measure
again; a file that does not parse, or was made for another configured fusion or model, is
ignored (and measured anew).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from services.common.keyword_form import ENGLISH
from services.search_tool.calibration import (
    RECALIBRATE_CHANGE,
    CalibratingEngine,
    Calibration,
    calibrate_collection,
)
from services.search_tool.config import FusionSettings
from services.search_tool.embedding import Embedder
from services.search_tool.engine.base import Fusion

logger = logging.getLogger(__name__)

CHECK_EVERY_S = 30.0
"""Least time between two checks of one collection's calibration by searches."""
DIRECTORY = ".fusion-calibration"


class FusionCalibrations:
    """Calibrated fusion per collection, for one search tool."""

    def __init__(
        self,
        engine: CalibratingEngine,
        embedder: Embedder,
        settings: FusionSettings,
        directory: Path | None,
        *,
        building: Callable[[str], bool] = lambda _: False,
        language_of: Callable[[str], str] = lambda _: ENGLISH,
    ) -> None:
        self._engine = engine
        self._language_of = language_of
        self._embedder = embedder
        self._settings = settings
        self._directory = directory
        self._building = building
        self._held: dict[str, Calibration | None] = {}
        self._checked: dict[str, float] = {}
        self._task: asyncio.Task[None] | None = None

    def fusion_for(self, collection: str) -> Fusion:
        """The fusion a HYBRID search of `collection` uses now (never waits for a measurement)."""
        calibration = self.get(collection)
        now = time.monotonic()
        if now - self._checked.get(collection, -CHECK_EVERY_S) >= CHECK_EVERY_S:
            self._checked[collection] = now
            self._schedule(collection, calibration)
        return calibration.fusion if calibration is not None else self._settings.to_fusion()

    def get(self, collection: str) -> Calibration | None:
        """The collection's calibration (memory, else its file), or None."""
        if collection not in self._held:
            self._held[collection] = self._load(collection)
        return self._held[collection]

    async def calibrate(self, collection: str) -> Calibration:
        """Measure `collection` now and keep (and store) the result."""
        calibration = await calibrate_collection(
            self._engine,
            self._embedder,
            collection,
            self._settings,
            language=self._language_of(collection),
        )
        self._held[collection] = calibration
        self._store(collection, calibration)
        logger.info(
            "calibrated fusion",
            extra={"collection": collection, "calibration": calibration.as_json()},
        )
        return calibration

    def forget(self, collection: str) -> None:
        """A dropped collection's calibration goes with it."""
        self._held.pop(collection, None)
        self._checked.pop(collection, None)
        path = self._path(collection)
        if path is not None:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def settled(self) -> None:
        """Wait for the calibration under way, if any (tests, benchmarks)."""
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.shield(self._task)

    def _schedule(self, collection: str, calibration: Calibration | None) -> None:
        if self._task is not None and not self._task.done():
            self._checked.pop(collection, None)  # look again at the next search
            return
        self._task = asyncio.get_running_loop().create_task(
            self._check(collection, calibration), name=f"calibrate {collection}"
        )

    async def _check(self, collection: str, calibration: Calibration | None) -> None:
        try:
            if self._building(collection):
                return
            if calibration is not None:
                chunks = (await self._engine.describe(collection)).chunk_count
                moved = abs(chunks - calibration.chunk_count)
                if moved <= RECALIBRATE_CHANGE * max(calibration.chunk_count, 1):
                    return
            await self.calibrate(collection)
        except asyncio.CancelledError:
            raise
        except Exception as error:  # a dropped collection, a storage fault: keep the fusion
            logger.warning(
                "fusion calibration failed; the configured fusion stays",
                extra={"collection": collection, "error": repr(error)},
            )

    def _path(self, collection: str) -> Path | None:
        return self._directory / f"{collection}.json" if self._directory is not None else None

    def _identity(self) -> dict[str, Any]:
        return {"fusion": self._settings.model_dump(), "model": self._embedder.model_name}

    def _load(self, collection: str) -> Calibration | None:
        path = self._path(collection)
        if path is None or not path.exists():
            return None
        try:
            stored = json.loads(path.read_text(encoding="utf-8"))
            if stored.get("for") != self._identity():
                return None
            return Calibration.from_json(stored["calibration"])
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
            logger.warning(
                "ignoring an unreadable fusion calibration",
                extra={"collection": collection, "path": str(path), "error": repr(error)},
            )
            return None

    def _store(self, collection: str, calibration: Calibration) -> None:
        path = self._path(collection)
        if path is None:
            return
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
            payload = {"for": self._identity(), "calibration": calibration.as_json()}
            partial.write_text(json.dumps(payload, indent=1), encoding="utf-8")
            partial.replace(path)
        except OSError as error:  # kept in memory; measured again after a restart
            logger.warning(
                "could not store a fusion calibration",
                extra={"collection": collection, "path": str(path), "error": repr(error)},
            )
