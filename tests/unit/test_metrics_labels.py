"""The metrics' queue label set stays bounded when many threads meet new queues at once."""

import threading

from durable_django.worker.metrics import OTHER_QUEUE, QueueLabels


def test_racing_threads_label_exactly_the_bound_and_fold_the_rest():
    labels = QueueLabels(limit=20)
    start = threading.Barrier(8)
    seen: dict[str, str] = {}
    lock = threading.Lock()

    def meet(worker: int) -> None:
        start.wait()
        for n in range(50):
            queue = f"q-{worker}-{n}"
            label = labels(queue)
            with lock:
                seen[queue] = label

    threads = [threading.Thread(target=meet, args=(worker,)) for worker in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    labelled = {queue for queue, label in seen.items() if label == queue}
    assert len(labelled) == 20
    assert all(label == OTHER_QUEUE for queue, label in seen.items() if queue not in labelled)
    # A queue once labelled keeps its label; the default queue always has its own.
    assert all(labels(queue) == queue for queue in labelled) and labels("default") == "default"
