"""Names that vulture (the dead-code check, configured in pyproject.toml) cannot see used, and why each is not dead.

Never imported: vulture reads this file beside durable_django/, so each name below counts as used. A name
reached only the way Django reaches an option (by its name) is ignored in pyproject.toml instead.
"""

from durable_django import apps, faults, models, states, testing
from durable_django.admin import operations, pagination, run_chart
from durable_django.engine import async_context, context, reconciler
from durable_django.store import overview, schema

_ = (
    # The migrations load each SQL object's version by name; vulture leaves migrations out.
    schema.schema_sql,
    # Django finds the AppConfig subclass in apps.py, and calls save() on every model.
    apps.DurableConfig,
    models.DurableModel.save,
    # The schema: models declare every table and column for the migrations and the admin; the store's
    # SQL reads and writes them, which vulture does not parse.
    models.RateStart,
    models.LeaseRenewal,
    models.ScheduleRun,
    models.Run.concurrency_while_waiting,
    models.Run.debounce_key,
    models.Run.debounce_until,
    models.Run.awaited_token,
    models.RateStart.expires_at,
    models.Stream.next_offset,
    models.Stream.closed_at,
    # Read by the admin's templates.
    operations.Operation.explanation,
    pagination.EstimatedCountPaginator.num_pages,
    pagination.EstimatedCountPaginator.truncated,
    run_chart.Bar.y,
    overview.WindowCounts.capped,
    overview.Overview.last_day,
    overview.Overview.created_per_minute,
    overview.Overview.landed_per_minute,
    overview.Overview.landed_capped,
    overview.Overview.oldest_pending_run_id,
    # Public API (API.md) that the package itself does not call: handlers, test suites and operators do.
    context.Context.patched,
    async_context.AsyncContext.patched,
    testing.ensure_database_url,
    testing.run_until_idle,
    reconciler.Reconciler.stranded,  # the read-only audit: every run in a state that must not exist
    # The specification of the run state machine, which tests/store/test_transitions.py holds the SQL to.
    states.ALLOWED_TRANSITIONS,
    # The engine's fault-injection points, armed by the tests (faults.reach() is the engine's side).
    faults.injected,
)
