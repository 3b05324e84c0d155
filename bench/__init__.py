"""Benchmarks of the durable core against raw SQL and peer task queues (run ``python bench/run_all.py``)."""
