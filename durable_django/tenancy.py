"""Tenant scoping of keys and schedule ids: stored as ``{tenant_id}:{key}`` or ``:{key}``."""

from __future__ import annotations

import uuid

from .exceptions import InvalidInput


def normalize_tenant(tenant_id) -> str | None:
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


def scope(key: str | None, tenant_id: str | None, *, what: str = "key") -> str | None:
    if key is None:
        return None
    if not isinstance(key, str) or not key:
        raise InvalidInput(f"{what} must be a non-empty string, got {key!r}")
    return f"{tenant_id or ''}:{key}"


def unscope(stored: str | None) -> str | None:
    """The key as the caller passed it (everything after the tenant prefix)."""
    if stored is None:
        return None
    return stored.split(":", 1)[1]
