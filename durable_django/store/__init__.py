"""The only door to the durable tables: every SQL statement lives in this package.

``runs`` (durable_run), ``journal`` (durable_step and durable_signal),
``schedules`` (durable_schedule), ``landing`` (the statement that ends runs),
``db`` (connection, JSON and row conversion). Callers receive frozen records.
"""
