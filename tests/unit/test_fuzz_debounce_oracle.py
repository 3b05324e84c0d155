"""The workload fuzzer's debounce oracle (tests/fuzz/checks.py), fed runs as the tables would give them."""

from tests.fuzz.checks import Run, debounce_problems


def debounced(run_id, call, created_at, started_at=None, claimed_at=None):
    return Run(
        run_id, "fuzz.quick", "succeeded", {"call": call}, None, 0, 0, None, created_at, started_at, claimed_at, None
    )


def test_one_run_with_the_last_input_is_a_debounce_that_worked():
    assert debounce_problems("k", [debounced("a", 2, 0.0, started_at=1.0, claimed_at=1.0)]) == []


def test_a_run_that_kept_an_earlier_input_is_reported():
    [problem] = debounce_problems("k", [debounced("a", 1, 0.0, started_at=1.0, claimed_at=1.0)])
    assert "kept input" in problem and "'call': 1" in problem


def test_a_submit_that_came_after_the_run_was_claimed_rightly_makes_a_second_run():
    runs = [debounced("a", 1, 0.0, started_at=0.9, claimed_at=0.8), debounced("b", 2, 0.85, started_at=1.5)]
    assert debounce_problems("k", runs) == []


def test_a_second_run_made_while_the_first_was_unclaimed_is_a_failed_debounce():
    runs = [debounced("b", 2, 0.4, started_at=1.5, claimed_at=1.5), debounced("a", 1, 0.0, started_at=0.9)]
    [problem] = debounce_problems("k", runs)
    assert problem.startswith("debounce key k: run b was made at 0.400 while a (made at 0.000) was unclaimed")


def test_a_second_run_beside_one_never_claimed_is_a_failed_debounce():
    runs = [debounced("a", 1, 0.0), debounced("b", 2, 2.0, started_at=2.6, claimed_at=2.6)]
    assert len(debounce_problems("k", runs)) == 1
