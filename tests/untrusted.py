"""A module outside every installed app with a side effect at import: no worker may import it on a run's word."""

from tests.workflows import effects

effects.record("untrusted-module-imported")


def job():
    effects.record("untrusted-job-ran")
