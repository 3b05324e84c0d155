"""Plug-ins that connect durable-django to other frameworks."""
