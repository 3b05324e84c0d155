"""Submitting many runs of one function at once (``enqueue_many``, ``ctx.spawn_many``): one validation
pass and one insert statement for the batch, joining the runs its keys already name."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from ..exceptions import InvalidInput
from ..flow_control import RunLimits
from ..storable import JSONB_MAX_BYTES, json_bytes, json_text
from ..store import inserts
from ..store import runs as run_store
from ..submission import BatchRequest, RunOptions
from ..tenancy import scope, scope_engine_key
from ..types import Run
from . import signalling, submit


def batch_request(
    name: str,
    inputs: Iterable[object],
    options: RunOptions,
    *,
    idempotency_keys: Sequence[str] | None = None,
    key_prefix: str | None = None,
    parent_run_id: str | None = None,
) -> BatchRequest:
    """Validate a batch of submits of one function: the request :func:`submit_batch` inserts.

    Every input is checked before anything is written; the shared options once, as
    :func:`submit.request` checks them.

    Args:
        idempotency_keys: the caller's keys, one per input (None: no keys).
        key_prefix: the engine keys each run ``{key_prefix}#{index}`` instead (spawn_many's children).

    Raises:
        InvalidInput: a bad input anywhere, keys that are not one per input, or a reserved key.
        UnknownFunction: no function ``name`` is registered (and no version was given).
    """
    if isinstance(inputs, (str, bytes, dict)) or not isinstance(inputs, Iterable):
        raise InvalidInput(f"inputs must be a list of inputs, got {type(inputs).__name__}")
    values = list(inputs)
    if idempotency_keys is not None:
        if isinstance(idempotency_keys, (str, bytes)) or not isinstance(idempotency_keys, Sequence):
            raise InvalidInput("idempotency_keys must be a list with one key per input")
        if len(idempotency_keys) != len(values):
            raise InvalidInput(
                f"idempotency_keys must hold one key per input: {len(idempotency_keys)} keys for {len(values)} inputs"
            )
    template, registration = submit.run_template(name, options, parent_run_id=parent_run_id)
    tenant = options.tenant_id
    run_ids = inserts.new_run_ids(len(values))
    made: list[str] = []
    encoded_inputs: list[str] = []
    keys: list[str | None] = []
    limits: list[RunLimits] = []
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
        encoded_inputs.append(encoded)
        keys.append(key)
        limits.append(submit.limits_of(registration, name, encoded))
    return BatchRequest(template, made, encoded_inputs, keys, limits, positions)


def submit_batch(batch: BatchRequest) -> list[Run]:
    """Insert a batch in one statement (one NOTIFY per queue made due); returns each input's run, in input order.

    A key that names an existing run joins it, as :func:`submit.submit` does.
    """
    if not batch.positions:
        return []
    runs: dict[int, Run] = {}
    pending = list(range(batch.size))
    for _ in range(submit.JOIN_ATTEMPTS):
        part = batch if len(pending) == batch.size else batch.subset(pending)
        stored = inserts.insert_many(part).runs()
        keyed: dict[str, int] = {}
        for index, run in zip(pending, stored, strict=True):
            if run is not None:
                runs[index] = run
                signalling.run_enqueued(run)
            elif (key := batch.idempotency_keys[index]) is not None:
                keyed[key] = index
        if keyed:
            for key, run in run_store.find_by_idempotency_keys(list(keyed)).items():
                runs[keyed[key]] = run
        pending = [index for index in pending if index not in runs]
        if not pending:
            return [runs[index] for index in batch.positions]
    # Only a caller whose snapshot hides the conflicting rows (REPEATABLE READ) ends up here.
    raise InvalidInput("the runs these keys name are not visible in this transaction; retry outside it")
