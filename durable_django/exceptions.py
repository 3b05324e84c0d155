"""The errors durable-django raises.

Every error a caller can act on subclasses :class:`DurableError`; each carries
the ids it is about. Control flow inside a handler (suspension, cancellation,
a lost lease) derives from ``BaseException`` so a handler's ``except
Exception:`` cannot swallow it.
"""

from django.core.exceptions import ImproperlyConfigured


class DurableError(Exception):
    """A durable-django operation failed."""

    def __init__(self, message: str | None = None, **ids: object) -> None:
        self.ids = ids
        for key, value in ids.items():
            setattr(self, key, value)
        super().__init__(message or self.__doc__)


class UnknownFunction(DurableError):
    """No durable function is registered under that name and version."""


class InvalidInput(DurableError):
    """An argument was rejected before anything was written."""


class InvalidSchedule(InvalidInput):
    """A cron expression or time zone could not be parsed."""


class RunNotFound(DurableError):
    """No run with that id is visible to this caller."""


class NotAChild(DurableError):
    """Only a direct child of the current run can be awaited."""


class StepResultNotSerializable(InvalidInput):
    """A step returned a value that cannot be stored as JSON."""


class OutputNotStored(InvalidInput):
    """The database refused to store a run's output; the run fails rather than poison its worker."""


class RecoveriesExhausted(DurableError):
    """A run's workers kept dying (or vanished) until MAX_RECOVERIES ran out; it fails rather than loop."""


class AttemptTimedOut(DurableError):
    """An attempt ran longer than its function's timeout; the run is retried per its policy."""


class DeadlineExceeded(DurableError):
    """The run had not finished by its deadline; it ends failed and its unfinished descendants are cancelled."""


class NonDeterministicReplay(DurableError):
    """A replay executed a step while its journal held steps it never asked for (the code changed under the
    run), and ``DURABLE["STRICT_REPLAY"]`` is on: the attempt fails and is retried per its policy."""


class ReadOnlyRecord(DurableError):
    """Durable records are written by durable_django's client API only, never through the models."""


class DuplicateRegistration(ImproperlyConfigured):
    """One (name, version) was registered twice with different callables."""


class MigrationsNotApplied(ImproperlyConfigured):
    """The durable_django migrations are not applied to the durable database."""


class ExtraNotInstalled(ImproperlyConfigured):
    """A feature was asked for whose optional dependency (a durable-django extra) is not installed."""


class DurableControlFlow(BaseException):
    """Base of the signals the engine raises through user code.

    A ``BaseException`` so that ``except Exception:`` in a handler lets it pass.
    """


class Suspended(DurableControlFlow):
    """The run has committed a sleep or a wait and this attempt is over."""


class Cancelled(DurableControlFlow):
    """A cancel was requested for the run; this attempt stops here."""


class LeaseLost(DurableControlFlow):
    """Another claim took the run over; this attempt may write nothing more."""


class DeadlineReached(DurableControlFlow):
    """The run's deadline has passed: this attempt stops and the run ends failed with DeadlineExceeded."""
