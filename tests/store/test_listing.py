import threading

import pytest

from durable_django import api
from tests.helpers import run_in_threads
from tests.store.factories import enqueue_many

pytestmark = pytest.mark.django_db(transaction=True)


def test_pages_run_newest_first_without_duplicates_or_gaps_under_concurrent_inserts():
    existing = enqueue_many(120)
    stop = threading.Event()

    def insert_meanwhile(index):
        if index == 0:
            while not stop.is_set():
                api.enqueue("tests.noop", {"late": True})
            return None
        seen, cursor = [], None
        while True:
            page = api.list_runs(limit=7, cursor=cursor)
            seen.extend(page.items)
            if page.next_cursor is None:
                stop.set()
                return seen
            cursor = page.next_cursor

    _, seen = run_in_threads(2, insert_meanwhile)
    ids = [run.run_id for run in seen]
    assert len(ids) == len(set(ids)), "a run appeared twice"
    assert {run.run_id for run in existing} <= set(ids), "a run that existed before paging was skipped"
    keys = [(run.created_at, run.run_id) for run in seen]
    assert keys == sorted(keys, reverse=True)


def test_list_filters_by_status_and_name():
    noop = api.enqueue("tests.noop", {})
    slow = api.enqueue("tests.slow", {"seconds": 0})
    assert [r.run_id for r in api.list_runs(name="tests.slow").items] == [slow.run_id]
    assert {r.run_id for r in api.list_runs(status="pending").items} == {noop.run_id, slow.run_id}
    assert api.list_runs(status="succeeded").items == []
