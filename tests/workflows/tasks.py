"""Fixture Django tasks, run by real workers through the DurableBackend of tests/settings.py.

Every call and every Tasks signal leaves a line in the shared effects directory,
so a test can see what a worker subprocess did and in which order.
"""

import asyncio
import inspect
import os
import time

from durable_django import RetryPolicy

from . import effects

try:  # Django 6
    from django.tasks import task
    from django.tasks.signals import task_enqueued, task_finished, task_started
except ImportError:  # Django 5.2 with the django-tasks backport
    from django_tasks import task
    from django_tasks.signals import task_enqueued, task_finished, task_started

# Django 6.1's @task (and the backport's) passes keywords beyond its own to the backend's task class,
# so ``@task(retry=...)`` declares a DurableTask option; Django 6.0's takes its own keywords only.
DECORATOR_TAKES_OPTIONS = any(
    parameter.kind is inspect.Parameter.VAR_KEYWORD for parameter in inspect.signature(task).parameters.values()
)


@task
def add(a, b):
    return a + b


def explode(message):
    raise ValueError(message)


if DECORATOR_TAKES_OPTIONS:
    explode = task(retry=RetryPolicy(max_attempts=1))(explode)
else:  # Django 6.0: the same option, set with DurableTask.using()
    explode = task(explode).using(retry=RetryPolicy(max_attempts=1))


@task
def always_fails():
    effects.record("always-fails")
    raise KeyError("broken on purpose")


@task(priority=0)
def record_order(tag):
    effects.record("order", tag)
    return tag


@task
async def multiply_later(x, y):
    await asyncio.sleep(0.01)
    return {"product": x * y}


@task(takes_context=True)
def flaky_with_context(context, succeed_on):
    effects.record("context-attempt", str(context.attempt))
    if context.attempt < succeed_on:
        raise RuntimeError(f"attempt {context.attempt} fails on purpose")
    return {"attempt": context.attempt, "result_id": context.task_result.id}


@task
def sleepy(seconds):
    effects.record("sleepy-started")
    # Short sleeps: a cancel reaches a thread between bytecodes, not inside one long sleep.
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(0.05)
    return "woke"


@task
def returns_a_set():
    return {1, 2}


def plain_function():
    """Not a task: a run naming it must fail, never call it."""
    effects.record("plain-function-called")


def _record_signal(name):
    def receiver(sender, task_result, **kwargs):
        if os.environ.get("DURABLE_TEST_EFFECTS_DIR"):
            effects.record("signals", f"{name} {task_result.id} {task_result.status} {task_result.attempts}")

    return receiver


# Module-level references: signals hold receivers weakly.
_on_enqueued = _record_signal("enqueued")
_on_started = _record_signal("started")
_on_finished = _record_signal("finished")
task_enqueued.connect(_on_enqueued, dispatch_uid="tests.workflows.tasks.enqueued")
task_started.connect(_on_started, dispatch_uid="tests.workflows.tasks.started")
task_finished.connect(_on_finished, dispatch_uid="tests.workflows.tasks.finished")
