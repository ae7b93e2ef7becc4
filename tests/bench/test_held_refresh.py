"""`bench/held_refresh.py`: rounds rotate over the refresh, a whole read after a compaction and a
whole read reusing nothing, each timed and named by the held collection's own log line, on a copy
that is removed afterwards."""

from __future__ import annotations

from pathlib import Path

from bench import held_refresh
from bench.search_latency import COLLECTION
from services.search_tool.documents import Document
from services.search_tool.engine.base import CollectionSpec
from services.search_tool.engine.lancedb import LanceDBEngine
from tests.search_tool.engine_fixtures import DIMENSIONS, record


async def _collection(path: Path) -> None:
    engine = await LanceDBEngine.open(path)
    try:
        await engine.ensure_collection(COLLECTION, CollectionSpec("m", DIMENSIONS))
        documents = [Document(id=f"d{i}", text=f"protein {i} in tumor cells") for i in range(200)]
        await engine.upsert(COLLECTION, [record(d) for d in documents])
    finally:
        await engine.close()


async def test_each_round_is_held_again_refreshed_or_read_whole_and_the_copy_is_removed(
    tmp_path: Path,
) -> None:
    await _collection(tmp_path / "source")
    work = tmp_path / "copy"
    result = await held_refresh.run(tmp_path / "source", rounds=2, written=10, work=work)
    assert [len(t) for t in result["held_again_s"].values()] == [2, 2, 2]
    log = result["held_log"]
    assert sum("refreshed (10 new rows read)" in line for line in log) == 2
    assert sum("read (10 of 200 texts tokenized)" in line for line in log) == 2  # compacted
    assert sum("read (200 of 200 texts tokenized)" in line for line in log) == 2
    assert all("200 chunks" in line for line in log)  # rewritten, not added
    assert set(result["ratio_to_read_whole"]) == {"refreshed", "compacted"}
    assert not work.exists()
