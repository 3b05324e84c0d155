"""Bulk operations by filter: cancel, resume or retry every run a filter matches, as a durable run.

The operation runs as a run of the package's own function (``BULK_FUNCTION``,
in ``durable_django/durable.py``), in batches journalled as steps, so a crash
redoes at most one batch, and a redone batch changes nothing twice (a cancel or
resume of a run it already ended or resumed is refused; a retry's new run has a
key made of the bulk run and the original). Its idempotency key is made of the
operation and the filter: a second identical request while it is live joins it.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from ..exceptions import InvalidInput
from ..states import RunStatus
from ..storable import json_text, text
from ..tenancy import normalize_tenant
from ..types import Run
from .runs import enqueue

BULK_FUNCTION = "durable_django.bulk"
OPERATIONS = ("cancel", "resume", "retry")
# The filters a bulk operation takes: list_runs()'s, and parked (the admin's filter of the runs parked for an
# operator, whom a bulk resume serves once the fault is fixed).
FILTERS = ("status", "name", "tenant_id", "input_contains", "parked")
# Generations of one filter's bulk runs looked through for a live one (each finished one is a key further).
MAX_GENERATIONS = 1000


def bulk_filters(filters: dict[str, Any]) -> dict[str, Any]:
    """The filters, checked as list_runs() checks them, without the unset ones.

    Raises:
        InvalidInput: an unknown filter or a bad value.
    """
    unknown = set(filters) - set(FILTERS)
    if unknown:
        raise InvalidInput(f"a bulk operation filters by {', '.join(FILTERS)} only, not {', '.join(sorted(unknown))}")
    checked = {key: value for key, value in filters.items() if value is not None}
    if "status" in checked and checked["status"] not in RunStatus.values:
        raise InvalidInput(f"unknown status {checked['status']!r}")
    if "name" in checked:
        text(checked["name"], what="name")
    if "tenant_id" in checked:
        checked["tenant_id"] = normalize_tenant(checked["tenant_id"])
    if "input_contains" in checked:
        json_text(checked["input_contains"], what="input_contains")
    if "parked" in checked and not isinstance(checked["parked"], bool):
        raise InvalidInput(f"parked must be True or False, got {checked['parked']!r}")
    if checked.get("parked") is False:
        del checked["parked"]  # not filtering: the same operation, the same key
    return checked


def start_bulk(operation: str, filters: dict[str, Any]) -> Run:
    """Start (or join, while it is live) the bulk run of ``operation`` on every run ``filters`` match.

    Raises:
        InvalidInput: an unknown operation or filter, or a bad filter value.
    """
    if operation not in OPERATIONS:
        raise InvalidInput(f"unknown bulk operation {operation!r}: one of {', '.join(OPERATIONS)}")
    checked = bulk_filters(filters)
    digest = hashlib.sha256(json.dumps([operation, checked], sort_keys=True).encode()).hexdigest()[:32]
    key = f"durable_django.bulk:{operation}:{digest}"
    for _ in range(MAX_GENERATIONS):
        run = enqueue(BULK_FUNCTION, {"operation": operation, "filters": checked}, idempotency_key=key)
        if run.is_live:
            return run
        key = f"durable_django.bulk:{operation}:{digest}:after:{run.run_id}"
    raise InvalidInput(f"more than {MAX_GENERATIONS} bulk runs of this filter are kept: purge finished runs")
