"""durable-django in hardbyte/postgresql-job-queue-benchmarking: its JSONL adapter and a runner without docker."""
