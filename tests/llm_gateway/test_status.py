"""GetStatus: per provider breaker state, failures, last error and counts; routes."""

from __future__ import annotations

from pathlib import Path

from quarry.llmgateway.v1 import llm_gateway_pb2 as pb

from tests.llm_gateway.gateway_fixtures import (
    gateway_settings,
    running_gateway,
    scripted_entry,
    user,
)


async def test_status_reports_an_open_breaker_its_last_error_and_the_counts(
    tmp_path: Path,
) -> None:
    script = tmp_path / "down.yaml"
    script.write_text("replies:\n  - error: {status: 503, message: upstream 503}\n  - text: back\n")
    down = scripted_entry(
        str(script),
        name="down",
        retry={"max_attempts": 1},
        breaker={"fail_max": 1, "reset_timeout_s": 60},
        context_window_tokens=64_000,
    )
    settings = gateway_settings(
        [down], {"agent": ["down", "extractive"], "offline": ["extractive"]}
    )
    async with running_gateway(settings) as stub:
        await stub.Generate(pb.GenerateRequest(messages=[user("hi")]))
        await stub.Generate(pb.GenerateRequest(messages=[user("hi")]))
        status = await stub.GetStatus(pb.GetStatusRequest())

    providers = {p.name: p for p in status.providers}
    failing = providers["down"]
    assert failing.kind == "scripted"
    assert failing.breaker_state == pb.BREAKER_STATE_OPEN
    assert failing.consecutive_failures == 1
    assert "upstream 503" in failing.last_error
    assert failing.last_error_at.seconds > 0
    assert (failing.requests, failing.successes, failing.failures) == (1, 0, 1)
    assert failing.context_window_tokens == 64_000
    healthy = providers["extractive"]
    assert healthy.breaker_state == pb.BREAKER_STATE_CLOSED
    assert (healthy.requests, healthy.successes, healthy.failures) == (2, 2, 0)
    assert {r.name: list(r.chain) for r in status.routes} == {
        "agent": ["down", "extractive"],
        "offline": ["extractive"],
    }
    assert status.default_route == "agent"
