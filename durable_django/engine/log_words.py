"""How the worker's log lines name what it runs, a claim, a failure and an error, for a person reading them.

A run's ``attempts`` counts claims (resumes after a sleep, a signal or a child
included), and only failures use up its retry budget: "attempt 3" read as
"failed twice" when it may have failed never. So a line says the claim and the
failures apart ("claim 3, after 1 failure"), and a failure says where it stands
in the budget ("failure 2 of 3"). An error is named by its class and its
message, on one line and bounded, so a log line never runs on for a traceback.
"""

from __future__ import annotations

from django.utils.translation import gettext, ngettext

from ..registry import registry
from ..storable import storable_text

# The longest error message a log line carries; the whole traceback is stored on the run and its attempt.
MAX_MESSAGE_CHARS = 200


def claim_words(claim: int, failures: int) -> str:
    """``claim 3, after 2 failures``: the claim's number and the failures before it (none: the claim alone)."""
    if not failures:
        return gettext("claim %(claim)d") % {"claim": claim}
    return ngettext(
        "claim %(claim)d, after %(failures)d failure", "claim %(claim)d, after %(failures)d failures", failures
    ) % {"claim": claim, "failures": failures}


def failure_words(failures: int, max_attempts: int) -> str:
    """``failure 2 of 3``: this failure's place in the retry budget."""
    return gettext("failure %(failures)d of %(max_attempts)d") % {"failures": failures, "max_attempts": max_attempts}


def error_words(error_type: str, exc: BaseException) -> str:
    """``builtins.ValueError: the message``: the class path and the message, on one line, at most
    ``MAX_MESSAGE_CHARS`` of it (an error without a message is named by its class alone)."""
    try:
        text = str(exc)
    except Exception:  # noqa: BLE001 - a broken __str__ leaves the class to name the error
        text = ""
    message = " ".join(storable_text(text).split())
    if len(message) > MAX_MESSAGE_CHARS:
        message = message[: MAX_MESSAGE_CHARS - 1].rstrip() + "…"
    return f"{error_type}: {message}" if message else error_type


def runnable_words(functions: list[str] | None) -> str:
    """What a worker with ``--functions`` (None: all) runs: its durable functions, and the Tasks backend's tasks.

    A worker claims every run named by a task path (version 0) when the Tasks
    plug-in is installed, or with ``--functions`` the paths it names that no
    durable.py registers; several versions of a function are named once.
    """
    versions: dict[str, list[int]] = {}
    for name, version in registry.pairs(functions):
        versions.setdefault(name, []).append(version)
    named = [
        name if len(found) == 1 else f"{name} ({', '.join(f'v{v}' for v in found)})" for name, found in versions.items()
    ]
    durable = (
        ngettext("durable function %(names)s", "durable functions %(names)s", len(named)) % {"names": ", ".join(named)}
        if named
        else gettext("no durable function")
    )
    if not registry.runs_task_paths():
        return durable
    if functions is None:
        return gettext("%(durable)s and every task of the Tasks backend") % {"durable": durable}
    paths = [name for name in functions if not registry.knows(name)]
    if not paths:
        return durable
    return ngettext(
        "%(durable)s and the Tasks-backend task %(paths)s",
        "%(durable)s and the Tasks-backend tasks %(paths)s",
        len(paths),
    ) % {"durable": durable, "paths": ", ".join(paths)}


def past_grace_words(count: int) -> str:
    """``1 run still running after the grace period``: what a stopping worker hands back last."""
    return ngettext(
        "%(count)d run still running after the grace period",
        "%(count)d runs still running after the grace period",
        count,
    ) % {"count": count}
