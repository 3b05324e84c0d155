"""How a worker thread survives a database error: its connection is replaced, and the thread goes on.

Every thread of the worker talks to PostgreSQL, and any call may meet a
restart, a dropped connection or a refused statement. None of them may kill
the thread, and each must leave the connection usable for the next call: that
is this one rule, used wherever a thread calls the database.
"""

from __future__ import annotations

from types import TracebackType

from django.db import DatabaseError

from ..engine import lifecycle


class Recovering:
    """``with Recovering() as failure:``: a ``DatabaseError`` raised in the block is not propagated.

    The connection the error came from is reset (its next use opens a new session), and the error is
    kept in ``failure.error`` for the caller to log or act on; any other exception propagates.
    """

    def __init__(self) -> None:
        self.error: DatabaseError | None = None

    def __enter__(self) -> Recovering:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> bool:
        if not isinstance(exc, DatabaseError):
            return False
        lifecycle.reset_connection()
        self.error = exc
        return True

    @property
    def unreachable(self) -> bool:
        """Whether the error said the database cannot be reached at all (rather than refusing one statement)."""
        return self.error is not None and lifecycle.database_unreachable(self.error)
