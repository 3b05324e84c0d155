"""The only door to the durable tables: every SQL statement lives in this package.

Callers receive frozen records. Its modules, by what they do:

- Plumbing: ``db`` (which connection, JSON in and out, rows to records), ``pool`` (a
  worker's engine connections), ``sessions`` (LISTEN, landing waits and stream reads on
  sessions of the store's own), ``schema/`` (the SQL functions the migrations load).
- Submitting: ``inserts`` (enqueue, batches, debounce), ``spawns`` (children, journalled
  with their parent's step), ``forks`` (a new run on a copy of a journal's prefix).
- Holding a run: ``claims`` (claim, start, release), ``leases`` (renewals no client
  transaction can block), ``flow`` (admission under concurrency and rate limits),
  ``journal`` (steps and signals), ``waits`` (sleeps, signals, children), ``progress``,
  ``streams`` (events and streams), ``landing`` (the transactions that end attempts and runs),
  ``kin`` (what a landing does to the parent it wakes and the descendants it cancels).
- Ending and repairing: ``cancellation``, ``deadlines``, ``reconcile`` (states that must not
  exist), ``purge`` (retention), ``bulk`` (set-based operator batches).
- Reading: ``runs``, ``attempts``, ``overview``, ``health``, ``task_results``,
  ``divergences``, ``workers`` (the worker rows).
- Schedules and pauses: ``schedules``, ``schedule_runs``, ``pauses``.
- Tests only: ``time_travel`` (what ``durable_django.testing`` uses to let time pass).
"""
