"""What a run has published, for its page: its events, and each stream's last items, under a fixed size."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..models import Event, Stream, StreamItem
from .display import MAX_CELL_CHARS, cut_text, json_excerpt, shorten

# Events and streams are capped; each stream shows its newest items.
MAX_EVENT_ROWS = 50
MAX_STREAM_ROWS = 20
STREAM_TAIL_ITEMS = 5


def published_context(alias: str, run_id: str) -> dict[str, Any]:
    """``events`` (key, value, attempt, when) and ``streams`` (key, items written, closed, last items)."""
    events = list(
        Event.objects.using(alias)
        .filter(run_id=run_id)
        .order_by("key")
        .values("key", "attempt", "updated_at", **json_excerpt("value", MAX_CELL_CHARS, "value"))[: MAX_EVENT_ROWS + 1]
    )
    streams = list(
        Stream.objects.using(alias)
        .filter(run_id=run_id)
        .order_by("created_at", "key")
        .values("key", "next_offset", "closed_at")[: MAX_STREAM_ROWS + 1]
    )
    return {
        "events": [_cut({**event, "key": shorten(event["key"])}) for event in events[:MAX_EVENT_ROWS]],
        "more_events": len(events) > MAX_EVENT_ROWS,
        "streams": [
            {**stream, "key": shorten(stream["key"]), "tail": _tail(alias, run_id, stream["key"])}
            for stream in streams[:MAX_STREAM_ROWS]
        ],
        "more_streams": len(streams) > MAX_STREAM_ROWS,
    }


def _tail(alias: str, run_id: str, key: str) -> list[dict[str, Any]]:
    rows = (
        StreamItem.objects.using(alias)
        .filter(run_id=run_id, key=key)
        .order_by("-offset")
        .values("offset", "attempt", "written_at", **json_excerpt("value", MAX_CELL_CHARS, "value"))[:STREAM_TAIL_ITEMS]
    )
    return [_cut(row) for row in reversed(rows)]


def _cut(row: Mapping[str, Any]) -> dict[str, Any]:
    """The row with its value as text, cut in SQL (``json_excerpt``)."""
    fields = dict(row)
    value = cut_text(fields.pop("value_text"), fields.pop("value_chars"))
    return {**fields, "value": value}
