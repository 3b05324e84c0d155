"""The chaos soak's client: a Django process on the soak's private PostgreSQL that serves the test.

The test process's own Django points at the session's test database, so every
call that goes through the client API runs here instead (``python -m
tests.chaos.client`` with the private ``DATABASE_URL``). It reads one JSON
request a line on stdin and answers one JSON line on stdout:

- ``{"op": "enqueue", "name": ..., "input": ..., "key": ...}`` -> the run id (the
  idempotency key makes a call sent again after a cut connection return the same run);
- ``{"op": "enqueue", ..., "options": {...}}``: with ``deadline`` (seconds) or ``debounce`` ([key, delay]:
  then no idempotency key);
- ``{"op": "signal", "run_id": ..., "signal": ..., "value": ..., "hold": seconds}`` -> the stored value
  (``hold``: emitted inside a transaction that stays open that long after the emit);
- ``{"op": "cancel", "run_id": ...}``, ``{"op": "resume", "run_id": ...}`` (the workload fuzzer's);
- ``{"op": "stranded"}`` -> ``Reconciler().stranded()`` as ``[[run_id, problem], ...]``.

While PostgreSQL restarts a call fails with a database error; it is sent again
(each call is safe to repeat) until it answers or ``patience`` seconds pass.
"""

import json
import sys
import time
import traceback


def main() -> None:
    import django

    django.setup()
    from django.db import Error, connections, transaction

    from durable_django import Debounce, api
    from durable_django.engine.reconciler import Reconciler
    from durable_django.exceptions import DurableError

    def enqueue(r):
        options = dict(r.get("options", {}))  # a copy: a call the database cut is sent again with the same request
        if "debounce" in options:
            key, delay = options.pop("debounce")
            options["debounce"] = Debounce(key, delay)
        else:
            options["idempotency_key"] = r["key"]
        return api.enqueue(r["name"], r["input"], **options).run_id

    def signal(r):
        if not r.get("hold"):
            return api.emit_signal(r["run_id"], r["signal"], r["value"])
        with transaction.atomic():  # a long client transaction (a slow view under ATOMIC_REQUESTS)
            stored = api.emit_signal(r["run_id"], r["signal"], r["value"])
            time.sleep(r["hold"])
        return stored

    def resume(r):
        try:
            return api.resume(r["run_id"]).status
        except DurableError as exc:  # it ended before its cancel landed: nothing to resume
            return f"refused: {type(exc).__name__}"

    operations = {
        "enqueue": enqueue,
        "signal": signal,
        "cancel": lambda r: str(api.cancel(r["run_id"])),
        "resume": resume,
        "stranded": lambda r: [[repair.run_id, repair.problem] for repair in Reconciler().stranded()],
    }
    for line in sys.stdin:
        request = json.loads(line)
        give_up = time.monotonic() + request.get("patience", 60)
        retries = 0
        while True:
            try:
                reply = {"ok": True, "result": operations[request["op"]](request)}
                break
            except Error as exc:  # the database went away (a restart): the call is safe to send again
                for connection in connections.all():
                    try:
                        connection.close()
                    except Exception:  # noqa: BLE001 - a broken connection is gone either way
                        connection.connection = None
                if time.monotonic() > give_up:
                    reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
                    break
                retries += 1
                time.sleep(0.1)
            except Exception:  # noqa: BLE001 - reported to the test, which fails with it
                reply = {"ok": False, "error": traceback.format_exc()}
                break
        reply["retries"] = retries
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
