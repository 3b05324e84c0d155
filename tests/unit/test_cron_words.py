"""The cron in words, as the schedules admin shows it."""

import pytest

from durable_django.engine.cron import parse
from durable_django.engine.cron_words import describe


@pytest.mark.parametrize(
    "expression, words",
    [
        ("* * * * *", "every minute"),
        ("*/5 * * * *", "every 5 minutes"),
        ("0 * * * *", "every hour"),
        ("15 * * * *", "every hour at minute 15"),
        ("0 */2 * * *", "every 2 hours"),
        ("0 9 * * 1", "at 09:00 on Mondays"),
        ("0 9 * * mon,fri", "at 09:00 on Mondays and Fridays"),
        ("30 2 * * *", "at 02:30 every day"),
        ("0 9,17 * * *", "at 09:00 and 17:00 every day"),
        ("*/15 9-17 * * 1-5", "every 15 minutes between 09:00 and 17:59 Monday to Friday"),
        ("0 0 1 * *", "at 00:00 on day 1 of the month"),
        ("0 6 1 1 *", "at 06:00 on day 1 of the month in January"),
        ("@daily", "at 00:00 every day"),
        ("@hourly", "every hour"),
        ("@weekly", "at 00:00 on Sundays"),
        ("*/5 * * * * *", "every 5 seconds"),
        ("* * * * * *", "every second"),
        ("30 0 9 * * *", "at 09:00:30 every day"),
        ("0 12 * 6-8 *", "at 12:00 every day in June to August"),
        ("0   9  * *   1", "at 09:00 on Mondays"),
    ],
)
def test_common_expressions_read_as_people_say_them(expression, words):
    parse(expression)  # every example is a valid schedule
    assert describe(expression) == words


@pytest.mark.parametrize("expression", ["5-10/2 1-3/2 * * *", "0 0 L * *", "0 0 * * 1#2", "1,2,3,4,5,6,7 1,2 * * *"])
def test_unusual_shapes_still_read_field_by_field(expression):
    words = describe(expression)
    assert words and all(piece in words for piece in expression.split()[:1])
