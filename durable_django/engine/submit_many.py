"""Submitting many runs of one function at once (``enqueue_many``, ``ctx.spawn_many``): one validation
pass and one insert statement for the batch, joining the runs its keys already name."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from ..exceptions import InvalidInput
from ..flow_control import Debounce, run_limits
from ..storable import JSONB_MAX_BYTES, json_bytes, json_text
from ..store import inserts
from ..store import runs as run_store
from ..tenancy import scope, scope_engine_key
from ..types import RetryPolicy, Run
from . import signalling, submit

# The insert parameters that vary from one run of a batch to the next (limits too: a key callable may
# leave one run unlimited); the rest are shared.
_ROW_COLUMNS = (
    "run_id",
    "input",
    "idempotency_key",
    "concurrency_key",
    "concurrency_limit",
    "concurrency_while_waiting",
    "rate_key",
    "rate_limit",
    "rate_per",
)


@dataclass(frozen=True, slots=True)
class Batch:
    """Many runs of one function, validated: the store's insert parameters and each input's run.

    ``params`` holds the values every run shares and, under the plural of each
    name in ``_ROW_COLUMNS`` (``run_ids``, ``inputs``, ...), one array per column
    that varies, one entry per distinct run: a key repeated in the batch makes one run.
    """

    params: dict[str, Any]
    # For each input, in input order: the index of its run in the arrays.
    positions: list[int]

    @property
    def size(self) -> int:
        return len(self.params["run_ids"])

    def rows(self, indexes: Sequence[int]) -> Batch:
        """The same batch restricted to some of its runs (without positions)."""
        subset = dict(self.params)
        for column in _ROW_COLUMNS:
            values = self.params[f"{column}s"]
            subset[f"{column}s"] = [values[index] for index in indexes]
        return Batch(subset, [])


def build_many(
    name: str,
    inputs: Iterable[object],
    *,
    idempotency_keys: Sequence[str] | None = None,
    key_prefix: str | None = None,
    coalesce_key: str | None = None,
    debounce: Debounce | None = None,
    tenant_id: object = None,
    delay: timedelta | float | None = None,
    available_at: datetime | None = None,
    version: int | None = None,
    queue: str = "default",
    priority: int = 0,
    parent_run_id: str | None = None,
    retry: RetryPolicy | None = None,
    deadline: datetime | timedelta | float | None = None,
) -> Batch:
    """Validate a batch of submits of one function and return its insert parameters.

    Every input is checked before anything is written; the shared options are checked once, as
    :func:`build` checks them.

    Args:
        idempotency_keys: the caller's keys, one per input (None: no keys).
        key_prefix: the engine keys each run ``{key_prefix}#{index}`` instead (spawn_many's children).

    Raises:
        InvalidInput: a bad input anywhere, keys that are not one per input, a reserved key, or
            ``coalesce_key`` or ``debounce``, which a batch refuses.
        UnknownFunction: no function ``name`` is registered (and no version was given).
    """
    if isinstance(inputs, (str, bytes, dict)) or not isinstance(inputs, Iterable):
        raise InvalidInput(f"inputs must be a list of inputs, got {type(inputs).__name__}")
    values = list(inputs)
    if coalesce_key is not None or debounce is not None:
        raise InvalidInput("a batch cannot coalesce or debounce: give neither coalesce_key nor debounce")
    if idempotency_keys is not None:
        if isinstance(idempotency_keys, (str, bytes)) or not isinstance(idempotency_keys, Sequence):
            raise InvalidInput("idempotency_keys must be a list with one key per input")
        if len(idempotency_keys) != len(values):
            raise InvalidInput(
                f"idempotency_keys must hold one key per input: {len(idempotency_keys)} keys for {len(values)} inputs"
            )
    shared, registration = submit.prepare(
        name,
        None,
        idempotency_key=None,
        coalesce_key=None,
        tenant_id=tenant_id,
        delay=delay,
        available_at=available_at,
        version=version,
        queue=queue,
        priority=priority,
        parent_run_id=parent_run_id,
        retry=retry,
        debounce=None,
        deadline=deadline,
    )
    limited = registration is not None and (registration.concurrency or registration.rate_limit)
    tenant = shared["tenant_id"]
    run_ids = inserts.new_run_ids(len(values))
    rows: dict[str, list[Any]] = {f"{column}s": [] for column in _ROW_COLUMNS}
    inputs, keys, made = rows["inputs"], rows["idempotency_keys"], rows["run_ids"]
    positions: list[int] = []
    run_of_key: dict[str, int] = {}
    total_bytes = 0
    for index, input in enumerate(values):
        encoded = json_text(input, what=f"input #{index}")  # every input, also one whose key repeats
        total_bytes += json_bytes(encoded)
        if total_bytes > JSONB_MAX_BYTES:  # the batch travels as one jsonb array
            raise InvalidInput(
                f"the inputs up to #{index} are {total_bytes} bytes of JSON together, more than one jsonb value "
                f"holds ({JSONB_MAX_BYTES}): enqueue them in smaller batches"
            )
        key: str | None = None
        if idempotency_keys is not None:
            key = scope(
                submit.unreserved(idempotency_keys[index], "an idempotency key"), tenant, what="idempotency_key"
            )
        elif key_prefix is not None:
            key = scope_engine_key(f"{key_prefix}#{index}", tenant)
        if key is not None:
            if key in run_of_key:
                positions.append(run_of_key[key])  # a key repeated in the batch: the same run
                continue
            run_of_key[key] = len(made)
        positions.append(len(made))
        made.append(run_ids[index])
        inputs.append(encoded)
        keys.append(key)
    for column in _ROW_COLUMNS[3:]:
        rows[f"{column}s"] = [None] * len(made)
    if limited:
        assert registration is not None
        for run, encoded in enumerate(inputs):
            limits = submit.limit_params(
                run_limits(name, json.loads(encoded), registration.concurrency, registration.rate_limit)
            )
            for column in _ROW_COLUMNS[3:]:
                rows[f"{column}s"][run] = limits[column]
    params = {**shared, **rows}
    for column in _ROW_COLUMNS:
        params.pop(column, None)
    return Batch(params, positions)


def insert_many(batch: Batch) -> list[Run]:
    """Insert a batch in one statement (one NOTIFY per queue made due); returns each input's run, in input order.

    A key that names an existing run joins it, as :func:`insert_or_join` does.
    """
    if not batch.positions:
        return []
    runs: dict[int, Run] = {}
    pending = list(range(batch.size))
    for _ in range(submit.JOIN_ATTEMPTS):
        part = batch if len(pending) == batch.size else batch.rows(pending)
        stored = inserts.insert_many(part.params).runs()
        keyed: dict[str, int] = {}
        for index, run in zip(pending, stored, strict=True):
            if run is not None:
                runs[index] = run
                signalling.run_enqueued(run)
            elif (key := batch.params["idempotency_keys"][index]) is not None:
                keyed[key] = index
        if keyed:
            for key, run in run_store.find_by_idempotency_keys(list(keyed)).items():
                runs[keyed[key]] = run
        pending = [index for index in pending if index not in runs]
        if not pending:
            return [runs[index] for index in batch.positions]
    # Only a caller whose snapshot hides the conflicting rows (REPEATABLE READ) ends up here.
    raise InvalidInput("the runs these keys name are not visible in this transaction; retry outside it")
