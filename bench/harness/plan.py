"""The harness's 2026-05-09 sweep (scripts/run_full_sweep.sh), shortened to fit a shared 2-core machine.

Its cells, flags and rates are kept; only phases are shorter and the clean sweep stops at 64 workers.
docs/harness.md states every difference. Each system runs each cell in a harness
run of its own under a timeout (the sweep's was 15 minutes for 8.5-10.5 minute cells: here 1.5x the
phases plus a minute), the order of the systems alternating from cell to cell.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def phases(*specs: str) -> list[str]:
    return [arg for spec in specs for arg in ("--phase", spec)]


CHAOS_1 = ["--producer-rate", "600", "--replicas", "1"]  # the sweep's phase B, one replica
CHAOS_2 = ["--producer-rate", "300", "--replicas", "2"]  # its process kills, two replicas
PRESSURE = ["--producer-mode", "fixed", "--producer-rate", "800", "--worker-count", "32"]

CELLS: list[tuple[str, str, list[str]]] = [
    *[
        (
            "clean",
            f"clean_w{workers}",
            [
                *("--producer-rate", "50000", "--producer-mode", "depth-target", "--target-depth", "4000"),
                *("--worker-count", str(workers)),
                *phases("warmup=warmup:10s", "clean=clean:30s"),
            ],
        )
        for workers in (4, 16, 64)
    ],
    (
        "chaos",
        "crash_recovery",
        [
            *CHAOS_2,
            *phases(
                "warmup=warmup:10s",
                "baseline=clean:20s",
                "kill=kill-worker(instance=0):25s",
                "restart=start-worker(instance=0):25s",
                "recovery=clean:35s",
            ),
        ],
    ),
    (
        "chaos",
        "postgres_restart",
        [
            *CHAOS_1,
            *phases("warmup=warmup:10s", "baseline=clean:20s", "restart=postgres-restart:30s", "recovery=clean:35s"),
        ],
    ),
    (
        "chaos",
        "repeated_kills",
        [
            *CHAOS_2,
            *phases(
                "warmup=warmup:10s",
                "baseline=clean:20s",
                "repeated=repeated-kill(instance=0,period=20s):60s",
                "recovery=clean:35s",
            ),
        ],
    ),
    (
        "chaos",
        "pg_backend_kill",
        [
            *CHAOS_1,
            *phases(
                "warmup=warmup:10s", "baseline=clean:20s", "kills=pg-backend-kill(rate=2):30s", "recovery=clean:35s"
            ),
        ],
    ),
    (
        "chaos",
        "pool_exhaustion",
        [
            *CHAOS_1,
            *phases(
                "warmup=warmup:10s",
                "baseline=clean:20s",
                "exhaustion=pool-exhaustion(idle_conns=300):30s",
                "recovery=clean:35s",
            ),
        ],
    ),
    (
        "pressure",
        "idle_in_tx",
        [*PRESSURE, *phases("warmup=warmup:10s", "clean_1=clean:20s", "idle_1=idle-in-tx:50s", "recovery_1=clean:40s")],
    ),
    # Not in the default groups: the idle-in-transaction cell with the sweep's own 240 s holder, the
    # reproduction of durable-django's claim rate decaying while the xmin horizon is pinned.
    (
        "long",
        "idle_in_tx_240s",
        [
            *PRESSURE,
            *phases("warmup=warmup:10s", "clean_1=clean:30s", "idle_1=idle-in-tx:240s", "recovery_1=clean:60s"),
        ],
    ),
    (
        "pressure",
        "sustained_high_load",
        [
            *PRESSURE,
            *phases("warmup=warmup:10s", "clean_1=clean:20s", "pressure_1=high-load:50s", "recovery_1=clean:35s"),
        ],
    ),
    (
        "pressure",
        "active_readers",
        [
            *PRESSURE,
            *phases("warmup=warmup:10s", "clean_1=clean:20s", "readers_1=active-readers:50s", "recovery_1=clean:35s"),
        ],
    ),
    (
        "pressure",
        "event_burst",
        [
            *("--producer-mode", "fixed", "--producer-rate", "1200", "--worker-count", "64"),
            *phases("warmup=warmup:10s", "clean_1=clean:20s", "pressure_1=high-load:60s", "recovery_1=clean:50s"),
        ],
    ),
]


def nominal_seconds(args: list[str]) -> int:
    from bench_harness.phases import parse_phase_spec

    return sum(parse_phase_spec(args[i + 1]).duration_s for i, arg in enumerate(args) if arg == "--phase")


def sweep(args, out: Path) -> int:
    sys.path.insert(0, str(Path(args.harness).resolve()))
    systems = [name.strip() for name in args.systems.split(",") if name.strip()]
    groups = set(args.only.split(",")) if args.only else {"clean", "chaos", "pressure"}
    chosen = set(args.cells.split(",")) if args.cells else None
    index = out / "index.jsonl"
    native = HERE / "native.py"
    order = 0
    for group, cell, cell_args in CELLS:
        if group not in groups or (chosen is not None and cell not in chosen):
            continue
        nominal = nominal_seconds(cell_args)
        timeout = int(nominal * 1.5 + 60)
        for system in systems if order % 2 == 0 else list(reversed(systems)):
            base = Path(tempfile.mkdtemp(prefix="harness-pg-"))
            command = [
                sys.executable,
                str(native),
                "--harness",
                args.harness,
                "--adapter-python",
                args.adapter_python,
                "--out",
                str(out),
                *(["--pg-bin", args.pg_bin] if args.pg_bin else []),
                "run",
                "--systems",
                system,
                "--skip-build",
                "--pg-image",
                "native",
                *cell_args,
            ]
            log_path = out / "logs" / f"{cell}_{system}.log"
            log_path.parent.mkdir(exist_ok=True)
            started, load_before = time.time(), os.getloadavg()
            print(f"[sweep] {cell} {system} ({nominal} s of phases, timeout {timeout} s)", file=sys.stderr, flush=True)
            with open(log_path, "w") as log:
                process = subprocess.Popen(
                    command,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env={**os.environ, "HARNESS_PG_BASE": str(base)},
                    start_new_session=True,
                )
                try:
                    rc = process.wait(timeout=timeout)
                    timed_out = False
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, signal.SIGKILL)
                    rc, timed_out = process.wait(), True
            if timed_out:
                stop_cluster(base, args.pg_bin)
            shutil.rmtree(base, ignore_errors=True)
            run_dir = ""
            for line in log_path.read_text().splitlines():
                if "results at:" in line:
                    run_dir = line.rsplit("/", 1)[-1].strip()
            record = {
                "group": group,
                "cell": cell,
                "system": system,
                "rc": rc,
                "timed_out": timed_out,
                "run_dir": run_dir,
                "seconds": round(time.time() - started, 1),
                "nominal_s": nominal,
                "timeout_s": timeout,
                "load_before": [round(v, 2) for v in load_before],
                "load_after": [round(v, 2) for v in os.getloadavg()],
                "args": cell_args,
            }
            with open(index, "a") as handle:
                handle.write(json.dumps(record) + "\n")
            print(f"[sweep]   rc={rc} timed_out={timed_out} {record['seconds']} s", file=sys.stderr, flush=True)
        order += 1
    return 0


def stop_cluster(base: Path, pg_bin: str | None) -> None:
    """A timed-out cell leaves its cluster up: stop it before the next cell starts one on the same port."""
    from bench.harness.native import find_pg_bin

    data = base / "data"
    if not data.exists():
        return
    command = [os.path.join(pg_bin or find_pg_bin(), "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"]
    if os.geteuid() == 0:
        command = ["runuser", "-u", "postgres", "--", *command]
    subprocess.run(command, check=False, capture_output=True)
