"""The tables of a sweep (bench/harness/plan.py): from each cell's summary.json and the audit of its tables.

Jobs lost is the harness's estimate (jobs enqueued minus jobs completed over the chaos and recovery
phases, from the adapter's rates: a backlog still draining counts as lost); beside it, from the database
when the cell ended, the jobs left claimed by a worker that is gone (durable-django: running with its lease
expired; procrastinate: doing), which nothing will finish. Disk per job is the event tables' total size
(heap, indexes, TOAST) over the jobs in them when the cell ended.
"""

from __future__ import annotations

import json
from pathlib import Path


def load(out: Path) -> tuple[list[dict], dict[str, dict], dict[str, dict]]:
    records = [json.loads(line) for line in (out / "index.jsonl").read_text().splitlines() if line.strip()]
    # A cell run again (--cells) replaces the earlier record of it, in the place the earlier one had.
    latest: dict[tuple[str, str], dict] = {}
    for record in records:
        key = (record["cell"], record["system"])
        record["runs"] = latest[key]["runs"] + 1 if key in latest else 1
        latest[key] = record
    cells = sorted(latest.values(), key=lambda c: next(i for i, r in enumerate(records) if r["cell"] == c["cell"]))
    audits: dict[str, dict] = {}
    audit_file = out / "audits.jsonl"
    if audit_file.exists():
        for line in audit_file.read_text().splitlines():
            record = json.loads(line)
            audits[f"{record['run_dir']}/{record['system']}"] = record
    summaries = {}
    for cell in cells:
        path = out / cell["run_dir"] / "summary.json" if cell["run_dir"] else None
        if path and path.exists():
            summaries[cell["run_dir"]] = json.loads(path.read_text())
    return cells, summaries, audits


def phase(summary: dict | None, system: str, label: str) -> dict:
    if not summary:
        return {}
    return summary.get("systems", {}).get(system, {}).get("phases", {}).get(label, {})


def metric(block: dict, name: str) -> float | None:
    value = block.get("metrics", {}).get(name, {}).get("median")
    return value


def fmt(value: float | None, digits: int = 0, suffix: str = "") -> str:
    if value is None:
        return "—"
    return f"{value:,.{digits}f}{suffix}"


def latency(block: dict) -> str:
    """The phase's medians of the adapter's rolling 30 s claim percentiles."""
    return f"{fmt(metric(block, 'claim_p50_ms'), 0)} / {fmt(block.get('median_claim_p99_ms'), 0)}"


def peak_dead(summary: dict | None, system: str) -> float | None:
    if not summary:
        return None
    peaks = [p.get("peak_dead_tup") for p in summary.get("systems", {}).get(system, {}).get("phases", {}).values()]
    peaks = [p for p in peaks if p is not None]
    return max(peaks) if peaks else None


def disk_per_job(audit: dict | None) -> str:
    if not audit or not audit.get("jobs"):
        return "—"
    return f"{sum(audit['table_bytes'].values()) / audit['jobs'] / 1024:,.2f} KB ({audit['jobs']:,} jobs)"


def stranded(audit: dict | None) -> str:
    if not audit:
        return "—"
    states = audit["states"]
    return str(states.get("running_lease_expired", 0) + states.get("doing", 0))


def status(cell: dict) -> str:
    again = f", run {cell['runs']}" if cell["runs"] > 1 else ""
    if cell["timed_out"]:
        return f"timed out ({cell['timeout_s']} s){again}"
    return ("completed" if cell["rc"] == 0 else f"failed (rc {cell['rc']})") + again


def render(out: Path) -> str:
    cells, summaries, audits = load(out)
    lines: list[str] = []

    def table(header: list[str]) -> None:
        lines.append("")
        lines.append("| " + " | ".join(header) + " |")
        lines.append("|" + "|".join(" --- " if i < 2 else " ---: " for i in range(len(header))) + "|")

    def row(values: list[str]) -> None:
        lines.append("| " + " | ".join(values) + " |")

    lines.append("### Clean sweep (depth-target 4,000)")
    table(["cell", "system", "jobs/s", "claim p50 ms", "claim p99 ms", "peak dead tuples", "disk per job", "status"])
    for cell in (c for c in cells if c["group"] == "clean"):
        summary, system = summaries.get(cell["run_dir"]), cell["system"]
        clean = phase(summary, system, "clean")
        audit = audits.get(f"{cell['run_dir']}/{system}")
        row(
            [
                cell["cell"],
                system,
                fmt(clean.get("median_throughput_per_s")),
                fmt(metric(clean, "claim_p50_ms")),
                fmt(clean.get("median_claim_p99_ms")),
                fmt(peak_dead(summary, system)),
                disk_per_job(audit),
                status(cell),
            ]
        )

    lines.append("")
    lines.append("### Chaos")
    table(
        [
            "scenario",
            "system",
            "baseline jobs/s",
            "baseline claim p50 / p99 ms",
            "recovery jobs/s",
            "recovered (90% of baseline) after",
            "jobs lost (harness estimate)",
            "left stranded",
            "claim p99 ms (recovery)",
            "status",
        ]
    )
    for cell in (c for c in cells if c["group"] == "chaos"):
        summary, system = summaries.get(cell["run_dir"]), cell["system"]
        baseline = phase(summary, system, "baseline")
        recovery = phase(summary, system, "recovery")
        recovered = recovery.get("chaos_recovery_time_s")
        row(
            [
                cell["cell"],
                system,
                fmt(baseline.get("median_throughput_per_s")),
                latency(baseline),
                fmt(recovery.get("median_throughput_per_s")),
                fmt(recovered, 0, " s") if recovered is not None else "not recovered",
                fmt(recovery.get("jobs_lost")),
                stranded(audits.get(f"{cell['run_dir']}/{system}")),
                fmt(recovery.get("median_claim_p99_ms")),
                status(cell),
            ]
        )

    lines.append("")
    lines.append("### Pressure")
    table(
        [
            "scenario",
            "system",
            "clean jobs/s",
            "clean claim p50 / p99 ms",
            "stress jobs/s",
            "recovery jobs/s",
            "claim p99 ms (stress)",
            "peak dead tuples",
            "disk per job",
            "status",
        ]
    )
    stress_label = {"idle_in_tx": "idle_1", "idle_in_tx_240s": "idle_1", "active_readers": "readers_1"}
    for cell in (c for c in cells if c["group"] in ("pressure", "long")):
        summary, system = summaries.get(cell["run_dir"]), cell["system"]
        clean = phase(summary, system, "clean_1")
        stress = phase(summary, system, stress_label.get(cell["cell"], "pressure_1"))
        recovery = phase(summary, system, "recovery_1")
        row(
            [
                cell["cell"],
                system,
                fmt(clean.get("median_throughput_per_s")),
                latency(clean),
                fmt(stress.get("median_throughput_per_s")),
                fmt(recovery.get("median_throughput_per_s")),
                fmt(stress.get("median_claim_p99_ms")),
                fmt(peak_dead(summary, system)),
                disk_per_job(audits.get(f"{cell['run_dir']}/{system}")),
                status(cell),
            ]
        )

    loads = [cell["load_before"][0] for cell in cells] + [cell["load_after"][0] for cell in cells]
    seconds = sum(cell["seconds"] for cell in cells)
    lines.append("")
    lines.append(
        f"{len(cells)} harness runs, {seconds / 60:.0f} minutes; 1-minute load average from "
        f"{min(loads):.2f} to {max(loads):.2f} at the cells' starts and ends."
    )
    return "\n".join(lines)
