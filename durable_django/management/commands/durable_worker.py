import gc
import logging
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import CommandError, CommandParser
from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop

from ...conf import durable_settings
from ...engine.preflight import ensure_migrated, ensure_valid_settings
from ...exceptions import ExtraNotInstalled, MigrationsNotApplied
from ...worker import Worker, WorkerOptions
from ...worker.reloading import run_with_reloader
from ...worker.shutdown import install_shutdown_handlers
from ..arguments import concurrency, name_list, non_negative_int, port, seconds, tenant
from ._base import PackageCommand

if TYPE_CHECKING:
    from ...worker.metrics import WorkerMetrics


class Command(PackageCommand):
    help = gettext_noop("Run durable functions (and the cron scheduler) until SIGINT or SIGTERM.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--concurrency", type=concurrency, default=4, help=_("attempts run at once (threads)"))
        parser.add_argument("--functions", type=name_list, help=_("only these function names (comma-separated)"))
        parser.add_argument("--queues", type=name_list, help=_("only these queues (comma-separated)"))
        parser.add_argument("--tenant", type=tenant, help=_("only this tenant's runs"))
        parser.add_argument("--no-scheduler", action="store_true", help=_("do not fire cron schedules here"))
        parser.add_argument("--burst", action="store_true", help=_("exit once nothing is claimable now"))
        parser.add_argument(
            "--max-abandoned",
            type=non_negative_int,
            default=4,
            help=_(
                "exit with status 3 (releasing its runs) once more threads than this are stuck in handlers "
                "past their timeout"
            ),
        )
        parser.add_argument(
            "--grace",
            type=seconds,
            default=30.0,
            help=_("seconds to let attempts finish after SIGTERM before releasing them"),
        )
        parser.add_argument(
            "--reload",
            action="store_true",
            help=_("restart when Python files change, like runserver (development only: needs DEBUG = True)"),
        )
        parser.add_argument(
            "--metrics-port",
            type=port,
            help=_(
                "serve Prometheus metrics on this port at /metrics (on DURABLE['METRICS_ADDRESS'], loopback "
                "by default); needs the prometheus extra"
            ),
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["reload"] and not settings.DEBUG:
            raise CommandError(
                _(
                    "--reload is for development and needs DEBUG = True; in production, let your process "
                    "manager restart workers after a deploy (docs/deployment.md)."
                )
            )
        if options["reload"] and options["burst"]:
            raise CommandError(_("--reload keeps a worker running across code changes; --burst exits: choose one."))
        if options["reload"] and options["metrics_port"] is not None:
            raise CommandError(
                _("--reload restarts the worker's process, which would serve --metrics-port twice: choose one.")
            )
        try:
            ensure_valid_settings()
        except ImproperlyConfigured as exc:
            raise CommandError(str(exc)) from None
        _configure_logging(options["verbosity"])
        metrics = _metrics() if options["metrics_port"] is not None else None
        try:
            ensure_migrated()
        except MigrationsNotApplied as exc:
            raise CommandError(str(exc)) from None
        _warn_unknown_functions(options["functions"])
        if metrics is not None:
            address = durable_settings.METRICS_ADDRESS
            try:
                metrics.serve(options["metrics_port"], address)
            except OSError as exc:
                raise CommandError(
                    _("--metrics-port: cannot serve on %(address)s: %(error)s")
                    % {"address": f"{address}:{options['metrics_port']}", "error": exc}
                ) from None

        def make_worker() -> Worker:
            return Worker(
                WorkerOptions(
                    concurrency=options["concurrency"],
                    functions=options["functions"],
                    queues=options["queues"],
                    tenant_id=options["tenant"],
                    burst=options["burst"],
                    grace=options["grace"],
                    scheduler=not options["no_scheduler"],
                    max_abandoned=options["max_abandoned"],
                ),
                metrics=metrics,
            )

        if options["reload"]:
            run_with_reloader(make_worker)
            return
        worker = make_worker()
        install_shutdown_handlers(worker)
        # From here this process is the worker: what it loaded to start (Django, the apps, the handlers) lives
        # as long as it does, so the cyclic collector need not walk it again at every full collection.
        gc.freeze()
        worker.run()
        if worker.exit_code:
            raise SystemExit(worker.exit_code)


def _configure_logging(verbosity: int) -> None:
    """Unless the project configures logging: INFO (one line per state change); -v 0 warnings, -v 2 debug."""
    logger = logging.getLogger("durable_django")
    if logger.handlers or logging.getLogger().handlers:
        return  # the project's LOGGING decides
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logger.addHandler(handler)
    logger.setLevel({0: logging.WARNING, 1: logging.INFO}.get(verbosity, logging.DEBUG))


def _metrics() -> "WorkerMetrics":
    """The worker's Prometheus metrics; a clear error when the prometheus extra is not installed."""
    try:
        from ...worker.metrics import WorkerMetrics
    except ExtraNotInstalled as exc:
        raise CommandError(f"--metrics-port: {exc}") from None
    return WorkerMetrics()


def _warn_unknown_functions(names: list[str] | None) -> None:
    """A name no durable.py registers may still be a Django Tasks path: warn, do not refuse."""
    from ...registry import registry

    for name in names or ():
        if not registry.knows(name):
            logging.getLogger("durable_django.worker").warning(
                "--functions names %r, which no durable.py registers; only Django Tasks runs by that path match", name
            )
