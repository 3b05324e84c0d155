#!/usr/bin/env python
"""The one-command demo: a shop's workflows survive a worker killed with SIGKILL.

    python example_project/demo.py

It migrates the database (``DATABASE_URL``, or else an embedded PostgreSQL
kept in ``example_project/.pgdata/``), starts ``manage.py durable_worker``,
places four orders, fires the nightly report and lets Django Tasks send the
confirmations. While the worker is charging a card it is killed with SIGKILL
and a second worker takes over once the dead one's lease expires. The demo
approves one order, rejects another, lets a third time out and cancels a
pre-order, shows the runs' progress as it happens, then prints the final state
of every run and how many times each step's side effect happened, as counted
by the fake services themselves. Timeouts and delays are shortened to seconds
through the environment variables that ``shopsite/settings.py`` reads.

Exit status 0 means every run reached its expected state and every side
effect happened exactly once.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

HERE = Path(__file__).resolve().parent
MANAGE = HERE / "manage.py"

# Production values are hours and days; the demo needs seconds.
DEMO_ENVIRONMENT = {
    "DJANGO_SETTINGS_MODULE": "shopsite.settings",
    "DURABLE_LEASE_SECONDS": "3",  # a dead worker's runs are reclaimed within 3 s
    "DURABLE_POLL_SECONDS": "1",
    "SHOP_APPROVAL_TIMEOUT_SECONDS": "8",
    "SHOP_FOLLOW_UP_DELAY_SECONDS": "3",
    "SHOP_GATEWAY_LATENCY_SECONDS": "2",  # the window in which the worker is killed
}

# What each kind of order must end as, and the side effects it must have had (each exactly once).
APPROVED_EFFECTS = (
    "reserve stock",
    "charge card",
    "book parcel",
    "hand over parcel",
    "email how-was-your-order",
    "email order-confirmation",
)
REFUNDED_EFFECTS = (
    "reserve stock",
    "charge card",
    "refund",
    "release stock",
    "email order-cancelled",
    "email order-confirmation",
)
CANCELLED_EFFECTS = ("email order-confirmation",)


class DemoFailed(Exception):
    """The demo could not go on: a timeout, or a worker that exited by itself."""


@dataclass
class Tracked:
    """A run the demo follows, and what it must end as."""

    label: str
    run_id: str
    expected: str  # "status" or "status (outcome)"
    # What its side effects are about in the services' records ("order 12"); the report's is known at the end.
    subject: str | None = None
    run: object = None  # the latest durable_django.Run
    recoveries_seen: int = 0


@dataclass
class OrderPlan:
    """One order of the demo and the decision it gets."""

    email: str
    items: list
    decision: str  # "approve", "reject", "none" (times out) or "cancel" (a pre-order, cancelled)
    order: object = None  # the shop.models.Order, once placed

    @property
    def expected_effects(self) -> tuple:
        return {
            "approve": APPROVED_EFFECTS,
            "reject": REFUNDED_EFFECTS,
            "none": REFUNDED_EFFECTS,
            "cancel": CANCELLED_EFFECTS,
        }[self.decision]

    @property
    def expected_fulfilment(self) -> str:
        return {
            "approve": "succeeded (shipped)",
            "reject": "succeeded (rejected)",
            "none": "succeeded (approval timed out)",
            "cancel": "cancelled",
        }[self.decision]


PLANS = [
    OrderPlan("ada@example.com", [{"sku": "mug", "quantity": 2}], "approve"),
    OrderPlan("grace@example.com", [{"sku": "tee", "quantity": 1}], "reject"),
    OrderPlan("alan@example.com", [{"sku": "poster", "quantity": 3}], "none"),
    OrderPlan("edsger@example.com", [{"sku": "tote", "quantity": 1}], "cancel"),
]


class Progress:
    """Shows each followed run's status: a table redrawn in place on a terminal, else a line per change."""

    def __init__(self, out, *, live: bool):
        self.out = out
        self.live = live
        self.started = time.monotonic()
        self._last: dict[str, str] = {}
        self._rows: list[tuple[str, str]] = []
        self._drawn = 0

    def elapsed(self) -> str:
        return f"{time.monotonic() - self.started:5.1f}s"

    def note(self, text: str) -> None:
        self._erase()
        print(f"[{self.elapsed()}] {text}", file=self.out)
        self._draw()

    def show(self, rows: list[tuple[str, str]]) -> None:
        if self.live:
            if rows != self._rows:
                self._rows = rows
                self._erase()
                self._draw()
            return
        for label, state in rows:
            if self._last.get(label) != state:
                self._last[label] = state
                print(f"[{self.elapsed()}]   {label:<22} {state}", file=self.out)
        self.out.flush()

    def finish(self) -> None:
        self._drawn = 0  # leave the last table on screen

    def _erase(self) -> None:
        if self.live and self._drawn:
            self.out.write(f"\x1b[{self._drawn}F\x1b[J")
            self._drawn = 0

    def _draw(self) -> None:
        if self.live and self._rows:
            lines = [f"    {label:<22} {state}" for label, state in self._rows]
            self.out.write("\n".join(lines) + "\n")
            self._drawn = len(lines)
        self.out.flush()


def claims(run) -> str:
    """Which claim of the run this is and how many failed before it: a resume after a sleep is a claim too."""
    if not run.failures:
        return f"claim {run.attempts}"
    return f"claim {run.attempts}, after {run.failures} failure{'' if run.failures == 1 else 's'}"


def describe(run) -> str:
    """A run's status in a few words: what it waits for, which claim, its outcome."""
    if run is None:
        return "not found"
    status = str(run.status)
    if status == "running":
        return f"running    {claims(run)}"
    if status == "waiting":
        waits = run.waiting_for or ""
        if waits.startswith("signal:"):
            return f"waiting    for the {waits.split(':')[1]!r} signal"
        if waits.startswith("child:"):
            return "waiting    for its shipping child run"
        return "waiting    asleep until the follow-up is due"
    if status == "pending":
        if run.available_at is not None and run.attempts == 0:
            return f"pending    starts at {run.available_at:%H:%M:%S} UTC"
        return "pending" if run.attempts == 0 else "pending    woken, ready to be claimed again"
    return f"{status:<10} {outcome(run)}".rstrip()


def outcome(run) -> str:
    """The short result of a landed run, as the final table's "(outcome)"."""
    output = run.output if isinstance(run.output, dict) else {}
    return output.get("outcome", "")


def final_state(run) -> str:
    status = str(run.status)
    return f"{status} ({outcome(run)})" if outcome(run) else status


class Demo:
    """The demo's story: workers, orders, a crash, decisions, and the verdict."""

    def __init__(self, out, *, live: bool, timeout: float, own_database_url: bool):
        self.out = out
        self.own_database_url = own_database_url
        self.progress = Progress(out, live=live)
        self.deadline = time.monotonic() + timeout
        self.timeout = timeout
        self.log_dir = Path(tempfile.mkdtemp(prefix="durable-demo-logs-"))
        self.workers: list[subprocess.Popen] = []
        self.tracked: list[Tracked] = []
        self.report: Tracked | None = None

    # -- the story ---------------------------------------------------------------

    def run(self) -> bool:
        from django.core.management import call_command

        self.say("Migrating the database ...")
        call_command("migrate", verbosity=0, interactive=False)

        first = self.start_worker()
        self.wait_for("the worker to sync the nightly-report schedule from settings", self.synced_schedule)
        self.place_orders()
        self.fire_report()

        victim = PLANS[0]
        self.say(f"{victim.order}: waiting for worker #1 to send the card charge to the payment gateway ...")
        self.wait_for(f"the charge of {victim.order}", lambda: self.charge_requested(victim.order))
        self.kill(first)
        self.start_worker()
        self.say(
            f"The dead worker's runs stay 'running' until their {os.environ['DURABLE_LEASE_SECONDS']} s lease "
            f"expires; then worker #2 reclaims them and replays each from its journal."
        )

        self.decide_orders()
        self.wait_for("every run to finish", self.all_finished)
        self.stream_an_answer()
        self.stop_workers(graceful=True)
        self.progress.finish()
        return self.conclude()

    def stream_an_answer(self) -> None:
        """A run writes an answer word by word; read it as it is written, as the shop's /ask/ page does."""
        from durable_django import enqueue, read_stream

        run = enqueue("shop.write_tokens", {"question": "When will my order arrive?", "delay": 0.05})
        self.say(f"Asked the shop when an order arrives: run {run.run_id} writes its answer word by word ...")
        words = []
        for item in read_stream(run.run_id, "tokens", timeout=max(1.0, self.deadline - time.monotonic())):
            words.append(item.value)
            if len(words) % 10 == 0:
                self.say(f"  ... {len(words)} words read so far, each as soon as it was written")
        self.say(f"Streamed answer ({len(words)} words; /ask/ shows it live in a browser): {' '.join(words)}")

    def place_orders(self) -> None:
        from shop.services import place_order

        for plan in PLANS:
            plan.order = place_order(plan.email, plan.items, start_in=3600 if plan.decision == "cancel" else None)
            what = {
                "approve": "will be approved",
                "reject": "will be rejected",
                "none": f"gets no answer, so its approval times out after "
                f"{os.environ['SHOP_APPROVAL_TIMEOUT_SECONDS']} s",
                "cancel": "is a pre-order starting in an hour, cancelled before it starts",
            }[plan.decision]
            self.say(f"Placed {plan.order} ({plan.email}): it {what}.")
            self.follow(f"{plan.order}", plan.order.fulfilment_run_id, plan.expected_fulfilment, str(plan.order))
            self.follow(f"{plan.order} confirmation", plan.order.confirmation_task_id, "succeeded", str(plan.order))

    def fire_report(self) -> None:
        from durable_django.api.schedules import fire_schedule_now

        run = fire_schedule_now("nightly-report")
        self.report = self.follow("nightly report", run.run_id, "succeeded")
        self.say("Fired the nightly-report schedule now (its cron is '0 2 * * *'), as the admin's 'fire now' does.")

    def decide_orders(self) -> None:
        from shop.services import cancel_order, decide

        undecided = [plan for plan in PLANS if plan.decision in ("approve", "reject")]
        for plan in PLANS:
            if plan.decision == "cancel":
                cancelled = cancel_order(plan.order)
                self.say(f"The customer cancels {plan.order}, the pre-order: cancel() -> {cancelled.value}.")

        def decided() -> bool:
            for plan in list(undecided):
                run = self.find(plan.order.fulfilment_run_id).run
                if run is not None and run.waiting_for == "signal:approval:0":
                    approved = plan.decision == "approve"
                    decide(plan.order, approved=approved, by="demo@shop.example")
                    self.say(
                        f"{'Approved' if approved else 'Rejected'} {plan.order}: emit_signal(run, 'approval', "
                        f"{{'approved': {approved}}})."
                    )
                    undecided.remove(plan)
            return not undecided

        self.wait_for("orders to reach their approval step", decided)

    # -- workers -------------------------------------------------------------------

    def start_worker(self) -> subprocess.Popen:
        number = len(self.workers) + 1
        log = open(self.log_dir / f"worker-{number}.log", "w")  # noqa: SIM115 - the worker process holds it
        proc = subprocess.Popen(
            [sys.executable, str(MANAGE), "durable_worker", "--concurrency", "8"],
            cwd=HERE,
            env=dict(os.environ),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        proc.number = number
        self.workers.append(proc)
        self.say(f"Started worker #{number}: manage.py durable_worker --concurrency 8 (pid {proc.pid}).")
        return proc

    def kill(self, proc: subprocess.Popen) -> None:
        self.refresh()  # who holds what, as of now
        held = [
            t.label
            for t in self.tracked
            if t.run is not None and str(t.run.status) == "running" and f":{proc.pid}:" in (t.run.worker_id or "")
        ]
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        self.say(
            f"Killed worker #{proc.number} with SIGKILL in the middle of it: no shutdown, no cleanup. "
            f"It was running {', '.join(held) or 'nothing the demo follows'}."
        )

    def stop_workers(self, *, graceful: bool) -> None:
        """SIGTERM (graceful: finish, release, exit) and wait; SIGKILL what is still there."""
        for proc in self.workers:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM if graceful else signal.SIGKILL)
        for proc in self.workers:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if graceful:
            self.say("Stopped worker #2 with SIGTERM (a graceful shutdown).")

    # -- following runs ------------------------------------------------------------

    def follow(self, label: str, run_id: str, expected: str, subject: str | None = None) -> Tracked:
        tracked = Tracked(label, str(run_id), expected, subject)
        self.tracked.append(tracked)
        return tracked

    def find(self, run_id: str) -> Tracked:
        return next(t for t in self.tracked if t.run_id == run_id)

    def refresh(self) -> None:
        from durable_django import get_run, list_runs

        for tracked in self.tracked:
            tracked.run = get_run(tracked.run_id)
            if tracked.run is not None and tracked.run.recoveries > tracked.recoveries_seen:
                tracked.recoveries_seen = tracked.run.recoveries
                self.say(
                    f"{tracked.label}: its lease expired, so another worker reclaimed it ({claims(tracked.run)}); "
                    "it replays its journal and carries on."
                )
        # Shipping runs are children that the fulfilment workflows spawn themselves.
        parents = {plan.order.fulfilment_run_id: plan.order for plan in PLANS if plan.order is not None}
        known = {t.run_id for t in self.tracked}
        for child in list_runs(name="shop.ship_order", limit=50).items:
            if child.parent_run_id in parents and child.run_id not in known:
                order = parents[child.parent_run_id]
                tracked = self.follow(f"{order} shipping", child.run_id, "succeeded", str(order))
                tracked.run = child
        self.progress.show([(t.label, describe(t.run)) for t in self.tracked])

    def wait_for(self, what: str, predicate, *, interval: float = 0.1):
        """Refresh the progress view until ``predicate()`` is truthy; fail at the demo's deadline."""
        while True:
            self.refresh()
            value = predicate()
            if value:
                return value
            for proc in self.workers:
                if proc.poll() is not None and proc.returncode != -signal.SIGKILL:
                    raise DemoFailed(f"worker #{proc.number} exited with status {proc.returncode}")
            if time.monotonic() > self.deadline:
                raise DemoFailed(f"timed out after {self.timeout:.0f}s waiting for {what}")
            time.sleep(interval)

    def synced_schedule(self) -> bool:
        from durable_django.api.schedules import get_schedule

        return get_schedule("nightly-report") is not None

    def charge_requested(self, order) -> bool:
        from shop.models import ServiceCall

        return ServiceCall.objects.filter(subject=str(order), action="charge card").exists()

    def all_finished(self) -> bool:
        shipping = [t for t in self.tracked if t.label.endswith("shipping")]
        approved = [plan for plan in PLANS if plan.decision == "approve"]
        return len(shipping) == len(approved) and all(t.run is not None and not t.run.is_live for t in self.tracked)

    # -- the verdict -----------------------------------------------------------------

    def conclude(self) -> bool:
        if isinstance(self.report.run.output, dict):
            self.report.subject = f"report until {self.report.run.output['until']}"
        ok = self.print_runs()
        ok = self.print_effects() and ok
        self.print_admin_help()
        if ok:
            print(
                f"\nDEMO OK: all {len(self.tracked)} runs reached their expected state and every step's side "
                f"effect happened exactly once.",
                file=self.out,
            )
        else:
            print("\nDEMO FAILED: see the rows marked MISMATCH above.", file=self.out)
        return ok

    def print_runs(self) -> bool:
        print("\nFinal state of every run:", file=self.out)
        print(
            f"  {'RUN':<22} {'FUNCTION':<42} {'STATE':<32} {'EXPECTED':<32} {'CLAIMS':>6} {'FAILURES':>8}  RECOVERED",
            file=self.out,
        )
        ok = True
        for tracked in self.tracked:
            run = tracked.run
            state = final_state(run)
            matches = state == tracked.expected
            ok = ok and matches
            print(
                f"  {tracked.label:<22} {run.name:<42} {state:<32} {tracked.expected:<32} {run.attempts:>6} "
                f"{run.failures:>8}  "
                f"{run.recoveries}{'' if matches else '   MISMATCH'}",
                file=self.out,
            )
        return ok

    def print_effects(self) -> bool:
        """Requests each service received and effects it carried out, per subject and step."""
        from django.db.models import Count
        from shop.models import LedgerEntry, ServiceCall

        subjects = {t.subject for t in self.tracked if t.subject}
        requests = {
            (row["subject"], row["action"]): row["n"]
            for row in ServiceCall.objects.filter(subject__in=subjects)
            .values("subject", "action")
            .annotate(n=Count("pk"))
        }
        effects = {
            (row["subject"], row["action"]): row["n"]
            for row in LedgerEntry.objects.filter(subject__in=subjects)
            .values("subject", "action")
            .annotate(n=Count("pk"))
        }
        # In the order things happen: order by order, step by step, the report last.
        expected = [(str(plan.order), action) for plan in PLANS for action in plan.expected_effects]
        if self.report.subject:
            expected.append((self.report.subject, "email nightly-report"))
        unexpected = sorted((set(effects) | set(requests)) - set(expected))
        recovered_subjects = self.recovered_subjects()

        print(
            "\nSide effects per step, as the services counted them (tables shop_service_call and shop_ledger):",
            file=self.out,
        )
        print(
            "  REQUESTS is what a service received, EFFECTS what it carried out. A step completed before the\n"
            "  crash replays from the journal and sends nothing; a step in flight sends its request again under\n"
            "  the same idempotency key, and the service returns the first answer.",
            file=self.out,
        )
        print(f"  {'SUBJECT':<40} {'STEP':<28} {'REQUESTS':>8} {'EFFECTS':>8}", file=self.out)
        ok = self.report.subject is not None
        for subject, action in expected + unexpected:
            sent, done = requests.get((subject, action), 0), effects.get((subject, action), 0)
            note = ""
            if (subject, action) not in expected or done != 1 or sent < 1:
                note, ok = "   MISMATCH", False
            elif sent > 1:
                if subject in recovered_subjects:
                    note = "   in flight at the crash: sent again under the same idempotency key"
                else:
                    note, ok = "   MISMATCH (repeated, yet none of its runs was recovered)", False
            print(f"  {subject:<40} {action:<28} {sent:>8} {done:>8}{note}", file=self.out)
        if self.report.subject is None:
            print("  MISMATCH: the nightly report has no output", file=self.out)
        return ok

    def recovered_subjects(self) -> set[str]:
        """Subjects that a run reclaimed from the dead worker worked on: their steps may have been cut off."""
        return {t.subject for t in self.tracked if t.run is not None and t.run.recoveries and t.subject}

    def print_admin_help(self) -> None:
        same = " (with the same DATABASE_URL)" if self.own_database_url else ""
        print(f"\nLook at the runs, their step journals and the ledger in the admin{same}:", file=self.out)
        print("  python example_project/manage.py createsuperuser", file=self.out)
        print("  python example_project/manage.py runserver", file=self.out)
        print(
            "  then open http://127.0.0.1:8000/admin/ (Durable execution: runs and schedules; "
            "Shop: orders, service calls, ledger entries)",
            file=self.out,
        )
        print(f"Worker logs: {self.log_dir}", file=self.out)

    def say(self, text: str) -> None:
        self.progress.note(text)

    def show_worker_logs(self, lines: int = 25) -> None:
        for path in sorted(self.log_dir.glob("worker-*.log")):
            tail = path.read_text().splitlines()[-lines:]
            print(f"\n--- last lines of {path} ---", file=self.out)
            print("\n".join(tail), file=self.out)


def database_description() -> str:
    url = os.environ.get("DATABASE_URL")
    if not url:
        return f"an embedded PostgreSQL (pgserver) with its data in {HERE / '.pgdata'}, kept between runs"
    parts = urlsplit(url)
    return f"DATABASE_URL: database {parts.path.lstrip('/') or '(default)'} on {parts.hostname or 'a local socket'}"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--timeout", type=float, default=180.0, help="give up after this many seconds")
    parser.add_argument("--plain", action="store_true", help="print one line per change, never redraw")
    args = parser.parse_args(argv)

    os.environ.update(DEMO_ENVIRONMENT)
    print(
        "durable-django demo: a shop's order workflows, a worker killed mid-workflow, "
        "and no side effect happening twice."
    )
    print(f"Database: {database_description()}")

    own_database_url = bool(os.environ.get("DATABASE_URL"))
    import django

    django.setup()  # starts the embedded PostgreSQL when DATABASE_URL is unset, and exports its URL
    live = sys.stdout.isatty() and os.environ.get("TERM", "dumb") != "dumb" and not args.plain
    demo = Demo(sys.stdout, live=live, timeout=args.timeout, own_database_url=own_database_url)
    try:
        return 0 if demo.run() else 1
    except DemoFailed as exc:
        print(f"\nDEMO FAILED: {exc}", file=sys.stdout)
        demo.show_worker_logs()
        return 1
    except KeyboardInterrupt:
        print("\nInterrupted; the runs left unfinished are picked up by the next worker.", file=sys.stdout)
        return 130
    finally:
        demo.stop_workers(graceful=False)


if __name__ == "__main__":
    sys.exit(main())
