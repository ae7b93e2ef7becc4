"""A model call made beside the run's own turns (a search's passage, a hit's judgment): what it
answers helps, and its failure must not fail the search it serves."""

from __future__ import annotations

import logging
from collections.abc import Mapping

from services.agent.ports import ModelClient, ModelRequest, ModelResponse
from services.agent.run import Deadline
from services.common.errors import DeadlineExceeded, QuarryError

log = logging.getLogger(__name__)


async def call_aside(
    model: ModelClient,
    request: ModelRequest,
    *,
    deadline: Deadline,
    failure: str,
    log_fields: Mapping[str, object],
) -> ModelResponse | None:
    """The reply to `request` within the caller's deadline, or None when the gateway or its
    provider failed (logged as `failure`, with `log_fields` and the route). The deadline
    expiring still raises: it ends the run."""
    try:
        return await model.generate(request, remaining_s=deadline.remaining())
    except DeadlineExceeded:
        raise
    except QuarryError as error:
        log.warning(
            failure, extra={**log_fields, "route": request.route, "error": error.message[:200]}
        )
        return None
