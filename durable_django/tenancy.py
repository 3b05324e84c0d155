"""Tenant scoping of keys and schedule ids: stored as ``{tenant_id}:{key}`` or ``:{key}``."""

from __future__ import annotations

import uuid
from typing import overload

from .exceptions import InvalidInput
from .storable import name


def normalize_tenant(tenant_id: object) -> str | None:
    """The canonical text of a tenant id, or None for the untagged namespace."""
    if tenant_id is None:
        return None
    if isinstance(tenant_id, uuid.UUID):
        return str(tenant_id)
    if isinstance(tenant_id, str):
        try:
            return str(uuid.UUID(tenant_id))
        except ValueError:
            pass
    raise InvalidInput(f"tenant_id must be a UUID, got {tenant_id!r}", tenant_id=tenant_id)


@overload
def scope(key: str, tenant_id: str | None, *, what: str = "key") -> str: ...
@overload
def scope(key: str | None, tenant_id: str | None, *, what: str = "key") -> str | None: ...
def scope(key: str | None, tenant_id: str | None, *, what: str = "key") -> str | None:
    """A caller's key (a storable name, else InvalidInput naming ``what``) scoped by its tenant."""
    if key is None:
        return None
    return scope_engine_key(name(key, what=what), tenant_id)


def scope_engine_key(key: str, tenant_id: str | None) -> str:
    """A key the engine made from parts already validated (a child's, a tick's, a debounce's), scoped."""
    return f"{tenant_id or ''}:{key}"


@overload
def unscope(stored: str) -> str: ...
@overload
def unscope(stored: None) -> None: ...
@overload
def unscope(stored: str | None) -> str | None: ...
def unscope(stored: str | None) -> str | None:
    """The key as the caller passed it (everything after the tenant prefix)."""
    if stored is None:
        return None
    return stored.split(":", 1)[1]
