"""The SQL objects the migrations write by hand, one file per version: ``<name>.v<N>.sql``.

PL/pgSQL functions, the trigger that keeps every attempt, and the tables whose text primary key
must not get Django's LIKE index. A migration that changes one adds the next version's file and
loads it by name, so each version is written once: the migration that introduced it, the squashed
migration (the last versions only) and the reverse of the next migration all read the same file.
"""

from importlib.resources import files


def schema_sql(name: str, version: int) -> str:
    """The statements that create version ``version`` of the schema object ``name``."""
    return files(__name__).joinpath(f"{name}.v{version}.sql").read_text(encoding="utf-8")
