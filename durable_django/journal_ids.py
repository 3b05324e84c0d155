"""The two strings that cross every layer: a journal entry's step id, and what a waiting run waits for.

Each has one encoder (``str()``; ``StepId.encode`` writes the same text
straight from a step call's arguments) and one parser (``parse``), used by the
engine that writes them, the store that matches them and the admin that shows
them. Names may themselves hold ``:``; the parts that follow a name are
numbers or fixed words, so parsing reads from the right.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from . import storable


def _step_text(version: int, name: str, occurrence: int) -> str:
    return f"v{version}:{name}:{occurrence}"


@dataclass(frozen=True, slots=True)
class StepId:
    """``v{version}:{name}:{occurrence}``, with ``#deadline`` for the deadline a timed wait journals."""

    version: int
    name: str
    occurrence: int
    deadline: bool = False

    DEADLINE_SUFFIX: ClassVar[str] = "#deadline"

    @classmethod
    def of(cls, version: int, name: object, occurrence: object) -> StepId:
        """A step id from a caller's name and occurrence, validated.

        Raises:
            InvalidInput: a name that is no storable name (storable.name), or an occurrence that is not an integer
                from 0 to PostgreSQL's largest integer.
        """
        return cls(
            version, storable.name(name, what="a step name"), storable.integer(occurrence, what="occurrence", minimum=0)
        )

    @staticmethod
    def encode(version: int, name: object, occurrence: object) -> str:
        """``str(StepId.of(version, name, occurrence))``, without making the record: every step call needs one.

        Raises:
            InvalidInput: as ``of`` does.
        """
        if (
            type(name) is str
            and 0 < len(name) <= storable.MAX_NAME_CHARS
            and name.isascii()
            and "\x00" not in name
            and type(occurrence) is int
            and 0 <= occurrence <= storable.PG_INTEGER_MAX
        ):
            return _step_text(version, name, occurrence)  # valid, as of() would find
        return str(StepId.of(version, name, occurrence))

    def deadline_id(self) -> StepId:
        """The id under which this wait journals its deadline."""
        return StepId(self.version, self.name, self.occurrence, deadline=True)

    def __str__(self) -> str:
        return _step_text(self.version, self.name, self.occurrence) + (self.DEADLINE_SUFFIX if self.deadline else "")

    @classmethod
    def parse(cls, encoded: str) -> StepId:
        """Take a stored step id apart.

        Raises:
            ValueError: it is not a step id.
        """
        body, deadline = encoded, encoded.endswith(cls.DEADLINE_SUFFIX)
        if deadline:
            body = body[: -len(cls.DEADLINE_SUFFIX)]
        version, _, rest = body.partition(":")
        name, _, occurrence = rest.rpartition(":")
        if not (version.startswith("v") and version[1:].isdigit() and name and occurrence.isdigit()):
            raise ValueError(f"not a step id: {encoded!r}")
        return cls(int(version[1:]), name, int(occurrence), deadline)


@dataclass(frozen=True, slots=True)
class WaitingFor:
    """What a waiting run waits for: a sleep's deadline, a signal, a child's landing, or its children's
    (``wait_for_all``: the last of them; ``wait_for_any``: the first)."""

    kind: str
    # The signal's name, the child's run id, or "all" / "any" for children; empty for a sleep.
    target: str = ""
    # Which emission of the signal.
    occurrence: int = 0

    SLEEP: ClassVar[str] = "sleep"
    SIGNAL: ClassVar[str] = "signal"
    CHILD: ClassVar[str] = "child"
    CHILDREN: ClassVar[str] = "children"
    # A parked run: its last allowed attempt failed, and it waits for an operator's resume() or cancel().
    OPERATOR: ClassVar[str] = "operator"
    # What the landing SQL puts before a child's run id to match a parent waiting for it.
    CHILD_PREFIX: ClassVar[str] = "child:"
    # How many of the awaited children a children wait needs landed: the last of them, or the first.
    ALL: ClassVar[str] = "all"
    ANY: ClassVar[str] = "any"

    @classmethod
    def sleep(cls) -> WaitingFor:
        return cls(cls.SLEEP)

    @classmethod
    def signal(cls, name: str, occurrence: int) -> WaitingFor:
        return cls(cls.SIGNAL, name, occurrence)

    @classmethod
    def child(cls, run_id: str) -> WaitingFor:
        return cls(cls.CHILD, run_id)

    @classmethod
    def children(cls, *, wait_all: bool) -> WaitingFor:
        """A wait for the awaited children (those marked with the waiting run's fence token)."""
        return cls(cls.CHILDREN, cls.ALL if wait_all else cls.ANY)

    @classmethod
    def children_waits(cls) -> list[str]:
        """Every encoded children wait, as the landing SQL matches them."""
        return [str(cls.children(wait_all=True)), str(cls.children(wait_all=False))]

    def __str__(self) -> str:
        if self.kind in (self.SLEEP, self.OPERATOR):
            return self.kind
        if self.kind == self.SIGNAL:
            return f"{self.SIGNAL}:{self.target}:{self.occurrence}"
        if self.kind == self.CHILDREN:
            return f"{self.CHILDREN}:{self.target}"
        return f"{self.CHILD_PREFIX}{self.target}"

    @classmethod
    def parse(cls, encoded: str) -> WaitingFor:
        """Take a stored ``waiting_for`` apart.

        Raises:
            ValueError: it names nothing a run can wait for.
        """
        kind, _, rest = encoded.partition(":")
        if kind == cls.SLEEP and not rest:
            return cls.sleep()
        if kind == cls.OPERATOR and not rest:
            return cls(cls.OPERATOR)
        if kind == cls.SIGNAL:
            name, _, occurrence = rest.rpartition(":")
            if name and occurrence.isdigit():
                return cls.signal(name, int(occurrence))
        if kind == cls.CHILD and rest:
            return cls.child(rest)
        if kind == cls.CHILDREN and rest in (cls.ALL, cls.ANY):
            return cls.children(wait_all=rest == cls.ALL)
        raise ValueError(f"not something a run waits for: {encoded!r}")
