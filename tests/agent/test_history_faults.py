"""Run history faults never fail a run: a full disk leaves a logged, counted gap; a damaged
database is checked at start and a damaged record answers DATA_LOSS naming its run, while every
other run keeps working. The faults are real: a full tmpfs (or a file-size limit in a subprocess
where no tmpfs can be mounted) and bytes overwritten by the test."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from quarry.agent.v1 import agent_pb2

from services.agent.client import RunOptions, parse_filter
from services.agent.config import HistorySettings
from services.agent.history import RunQuery, RunStore
from services.agent.testing import FunctionModel, search_then_answer
from services.common.errors import DataLoss, InvalidArgument, QuarryError
from tests.agent.fake_search import FakeSearch
from tests.agent.test_run_history import Start, serve  # noqa: F401  (the fixture)
from tests.faults import can_mount_tmpfs, damage, fill, small_filesystem

STORE_LOG = "services.agent.history"


def _record(run_id: str, started_at: float, text: str = "") -> agent_pb2.RunRecord:
    record = agent_pb2.RunRecord(
        run_id=run_id,
        collection="docs",
        status=agent_pb2.RUN_STATUS_RUNNING,
        request=agent_pb2.RunRequest(query=f"q {run_id} {text}", collection="docs"),
    )
    record.started_at.FromNanoseconds(int(started_at * 1e9))
    return record


async def _write_run(store: RunStore, run_id: str, started_at: float, text: str = "") -> None:
    record = _record(run_id, started_at, text)
    store.begin(record)
    record.status = agent_pb2.RUN_STATUS_COMPLETED
    record.ended_at.FromNanoseconds(int((started_at + 1) * 1e9))
    steps = [agent_pb2.StepRecord(index=1, text=text)]
    await store.finish(record, 0, [], steps)


@pytest.fixture
def tmpfs(tmp_path: Path) -> Path:
    if not can_mount_tmpfs(tmp_path / "probe"):
        pytest.skip("no tmpfs can be mounted here; the RLIMIT_FSIZE test covers a full disk")
    return tmp_path / "small"


async def test_on_a_full_disk_a_run_still_answers_and_the_gap_is_logged_and_counted(
    serve: Start,  # noqa: F811
    search: FakeSearch,
    tmpfs: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    with small_filesystem(tmpfs, 512 * 1024):
        agent = await serve(
            FunctionModel(search_then_answer(1)),
            search,
            history=HistorySettings(path=tmpfs / "runs.sqlite3"),
        )
        client = agent.client()
        before = await client.run("temporary directory", RunOptions(collection="python-docs"))
        assert agent.store is not None
        fill(tmpfs)

        with caplog.at_level(logging.ERROR, logger=STORE_LOG):
            events = [
                e
                async for e in client.stream_run(
                    "temporary directory " + "x" * 3000, RunOptions(collection="python-docs")
                )
            ]

        assert events[-1].WhichOneof("event") == "done"
        assert events[-1].done.response.answer.text
        assert agent.store.failed_writes >= 1
        gaps = [r for r in caplog.records if r.getMessage().startswith("run history write failed")]
        assert gaps
        assert gaps[0].run_id == events[0].started.run_id  # type: ignore[attr-defined]
        assert "full" in gaps[0].error  # type: ignore[attr-defined]
        earlier = await client.get_run(before.run_id)
        assert earlier.status == agent_pb2.RUN_STATUS_COMPLETED
        (tmpfs / "filler").unlink()
        after = await client.run("temporary directory", RunOptions(collection="python-docs"))
        assert (await client.get_run(after.run_id)).status == agent_pb2.RUN_STATUS_COMPLETED
        for c in agent.clients:
            await c.close()
        await agent.server.stop(0)
        await agent.store.close()
        agent.clients.clear()
        agent.store = None


_FSIZE_SCRIPT = textwrap.dedent(
    """
    import asyncio, json, resource, signal, sys
    from pathlib import Path
    from services.agent.config import HistorySettings
    from services.agent.history import RunStore
    from tests.agent.test_history_faults import _write_run

    async def main(path):
        store = RunStore(HistorySettings(path=path))
        store.open()
        await _write_run(store, "before", 1000.0, "small")
        biggest = max(p.stat().st_size for p in path.parent.iterdir())
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of a killed process
        resource.setrlimit(resource.RLIMIT_FSIZE, (biggest, biggest))
        await _write_run(store, "during", 1001.0, "x" * 2_000_000)
        before = await store.get("before")
        print(json.dumps({"failed_writes": store.failed_writes, "before": before.run_id}))
        await store.close()

    asyncio.run(main(Path(sys.argv[1])))
    """
)


def test_a_file_size_limit_fails_the_write_not_the_run_and_counts_it(tmp_path: Path) -> None:
    """The documented equivalent of a full disk where no tmpfs can be mounted."""
    done = subprocess.run(
        [sys.executable, "-c", _FSIZE_SCRIPT, str(tmp_path / "runs.sqlite3")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["failed_writes"] == 2  # its start and its end; the record has a gap
    assert result["before"] == "before"
    assert "run history write failed" in done.stderr


async def _damaged_history(tmp_path: Path) -> tuple[HistorySettings, list[str]]:
    """35 finished runs of ~3 KB each, the database closed, then 4 KB in its middle overwritten."""
    settings = HistorySettings(path=tmp_path / "runs.sqlite3")
    store = RunStore(settings)
    store.open()
    run_ids = [f"run-{n:02d}" for n in range(35)]
    for n, run_id in enumerate(run_ids):
        await _write_run(store, run_id, 1000.0 + n, f"step text {n} " * 250)
    await store.close()
    size = settings.path.stat().st_size
    damage(settings.path, offset=size // 2, length=4096)
    return settings, run_ids


async def test_a_damaged_history_is_checked_at_start_and_only_damaged_runs_answer_data_loss(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings, run_ids = await _damaged_history(tmp_path)
    store = RunStore(settings)
    with caplog.at_level(logging.INFO, logger=STORE_LOG):
        store.open()
    assert store.findings
    [report] = [r for r in caplog.records if r.getMessage().startswith("run history is damaged")]
    assert report.findings == store.findings  # type: ignore[attr-defined]

    damaged: list[DataLoss] = []
    readable = []
    for run_id in run_ids:
        try:
            record = await store.get(run_id)
        except DataLoss as error:
            damaged.append(error)
        else:
            assert record is not None
            assert record.run_id == run_id
            readable.append(run_id)
    assert damaged
    for loss in damaged:
        assert f"run {loss.metadata['run_id']} is damaged" in loss.message
    assert len(readable) >= 25
    await _write_run(store, "new-run", 5000.0, "after the damage")
    new = await store.get("new-run")
    assert store.failed_writes or (new is not None and new.steps[0].text == "after the damage")
    await store.close()


async def test_a_sound_history_is_checked_at_start_and_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = RunStore(HistorySettings(path=tmp_path / "runs.sqlite3"))
    with caplog.at_level(logging.INFO, logger=STORE_LOG):
        store.open()
    assert store.findings == []
    assert any(r.getMessage() == "run history checked: ok" for r in caplog.records)
    await store.close()


async def test_get_run_of_a_damaged_record_is_data_loss_naming_it_over_grpc(
    serve: Start,  # noqa: F811
    search: FakeSearch,
    tmp_path: Path,
) -> None:
    settings, run_ids = await _damaged_history(tmp_path)
    agent = await serve(FunctionModel(search_then_answer(1)), search, history=settings)
    client = agent.client()
    codes: dict[str, str] = {}
    messages: dict[str, str] = {}
    for run_id in run_ids:
        try:
            await client.get_run(run_id)
            codes[run_id] = "OK"
        except QuarryError as error:
            codes[run_id], messages[run_id] = error.code, error.message
    assert set(codes.values()) == {"OK", "DATA_LOSS"}
    assert all(run_id in message for run_id, message in messages.items())
    answered = await client.run("temporary directory", RunOptions(collection="python-docs"))
    assert answered.answer.text


async def test_a_run_refused_before_it_starts_is_not_recorded(
    serve: Start,  # noqa: F811
    search: FakeSearch,
) -> None:
    """`../x` reached the search tool, failed there INVALID_ARGUMENT, and was recorded."""
    agent = await serve(FunctionModel(search_then_answer(1)), search)
    client = agent.client()
    with pytest.raises(InvalidArgument) as refused:
        await client.run("temporary directory", RunOptions(collection="../x"))
    assert refused.value.code == "INVALID_ARGUMENT"
    assert [v.field for v in refused.value.violations] == ["collection"]
    assert not search.requests
    assert agent.store is not None
    runs, _ = await agent.store.list_runs(RunQuery())
    assert runs == []


async def test_a_run_whose_filter_is_refused_before_its_first_step_is_not_recorded(
    serve: Start,  # noqa: F811
    search: FakeSearch,
) -> None:
    agent = await serve(FunctionModel(search_then_answer(1)), search)
    client = agent.client()
    bad = parse_filter(
        '[{"conditions": [{"field": "colour", "operator": "equals", "value": "x"}]}]'
    )
    with pytest.raises(QuarryError) as refused:
        await client.run("temporary directory", RunOptions(collection="python-docs", filter=bad))
    assert refused.value.code == "INVALID_ARGUMENT"
    good = await client.run("temporary directory", RunOptions(collection="python-docs"))
    assert agent.store is not None
    runs, _ = await agent.store.list_runs(RunQuery())
    assert [r.run_id for r in runs] == [good.run_id]
