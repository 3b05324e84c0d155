"""Side effects that survive process death: one appended line per call, in a shared file."""

import os


def _path(name: str) -> str:
    return os.path.join(os.environ["DURABLE_TEST_EFFECTS_DIR"], name)


def record(name: str, value: str = "") -> None:
    with open(_path(name), "a") as handle:
        handle.write(f"{value}\n")


def count(name: str) -> int:
    try:
        with open(_path(name)) as handle:
            return sum(1 for _ in handle)
    except FileNotFoundError:
        return 0


def exists(name: str) -> bool:
    return os.path.exists(_path(name))


def remove(name: str) -> None:
    os.remove(_path(name))


def touch(name: str) -> None:
    with open(_path(name), "w"):
        pass
