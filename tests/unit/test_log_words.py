"""How the worker's log names a claim, a failure and an error: plurals, one line, a bounded message."""

from durable_django.engine.log_words import MAX_MESSAGE_CHARS, claim_words, error_words, failure_words


def test_a_claim_says_the_failures_before_it_apart():
    assert claim_words(1, 0) == "claim 1"
    assert claim_words(4, 0) == "claim 4"  # resumed after sleeps: claims, no failure
    assert claim_words(2, 1) == "claim 2, after 1 failure"
    assert claim_words(3, 2) == "claim 3, after 2 failures"


def test_a_failure_says_where_it_stands_in_the_budget():
    assert failure_words(2, 3) == "failure 2 of 3"


def test_an_error_keeps_its_type_and_message_on_one_bounded_line():
    assert error_words("builtins.ValueError", ValueError("card declined")) == "builtins.ValueError: card declined"
    assert error_words("builtins.KeyError", KeyError("sku")) == "builtins.KeyError: 'sku'"
    assert error_words("builtins.RuntimeError", RuntimeError()) == "builtins.RuntimeError"
    multi = error_words("builtins.ValueError", ValueError("first line\n  second\tline\r\n"))
    assert multi == "builtins.ValueError: first line second line"
    long = error_words("builtins.ValueError", ValueError("x" * 10_000))
    assert long == "builtins.ValueError: " + "x" * (MAX_MESSAGE_CHARS - 1) + "…"
    assert "\x00" not in error_words("builtins.ValueError", ValueError("nul\x00here"))


def test_an_error_whose_str_raises_is_named_by_its_class():
    class Unprintable(Exception):
        def __str__(self):
            raise RuntimeError("no")

    assert error_words("tests.Unprintable", Unprintable()) == "tests.Unprintable"
