"""Cancel, resume or retry every run the listing's filters match ("select all" in the action bar).

The admin only starts the operation, as a durable run of the package's own
(``api.bulk``), and sends the operator to that run's page, where its progress
shows; a second identical request joins the live one.
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.admin import helpers
from django.contrib.admin.options import IncorrectLookupParameters
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.http.request import QueryDict
from django.utils.translation import gettext

from ..api import bulk as bulk_api
from ..exceptions import InvalidInput
from ..models import Run
from . import search
from .base import DurableModelAdmin
from .display import run_url
from .filters import FunctionFilter, ParkedFilter, TenantFilter, tenant_uuid
from .operations import Operation, confirm_then_perform

# Query parameters of the listing that are no filter (paging, the admin's own markers).
_NOT_FILTERS = {"p", "o", "e", "_changelist_filters", "_to_field", "_popup"}


def filters_of(query: QueryDict) -> dict[str, Any]:
    """The listing's filters as a bulk operation takes them (list_runs()'s).

    Raises:
        InvalidInput: a filter a bulk operation cannot express (dates, parent, held runs, untagged runs, a
            search by id or key), or a malformed input search.
    """
    filters: dict[str, Any] = {}
    unsupported = []
    for key in query:
        value = query.get(key, "").strip()
        if key in _NOT_FILTERS or value == "":
            continue
        if key == "status__exact":
            filters["status"] = value
        elif key == FunctionFilter.parameter_name:
            filters["name"] = value
        elif key == ParkedFilter.parameter_name and value == "yes":
            filters["parked"] = True
        elif key == TenantFilter.parameter_name and value != TenantFilter.UNTAGGED:
            filters["tenant_id"] = tenant_uuid(value)
        elif key == "q" and search.is_input_search(value):
            try:
                filters["input_contains"] = search.input_document(value)
            except IncorrectLookupParameters as exc:
                raise InvalidInput(str(exc)) from None
        else:
            unsupported.append(key)
    if unsupported:
        raise InvalidInput(
            gettext(
                "an operation on every matching run takes the status, function, tenant and parked filters and an "
                "input search only, not %(filters)s: select the runs instead"
            )
            % {"filters": ", ".join(sorted(unsupported))}
        )
    return bulk_api.bulk_filters(filters)


def bulk_by_filter(
    model_admin: DurableModelAdmin[Run], request: HttpRequest, operation: Operation[Run]
) -> HttpResponse | None:
    """Confirm, then start (or join) the durable run of ``operation`` on every run the filters match."""
    try:
        filters = filters_of(request.GET)
    except InvalidInput as exc:
        model_admin.message_user(request, str(exc), messages.ERROR)
        return None
    if request.POST.get("confirm") == "yes":
        run = bulk_api.start_bulk(operation.key, filters)
        model_admin.message_user(
            request,
            gettext("%(verb)s: every matching run, in batches, as run %(run_id)s")
            % {"verb": operation.verb, "run_id": run.run_id},
            messages.SUCCESS,
        )
        return HttpResponseRedirect(run_url(run.run_id))
    _, confirmation = confirm_then_perform(
        model_admin,
        request,
        operation=operation,
        targets=[],
        describe=str,
        # The page's selection goes back too: the listing takes an action only with one (with "select all",
        # Django's action bar checks every row of the page).
        hidden=[
            ("action", f"{operation.key}_runs"),
            ("index", "0"),
            ("select_across", "1"),
            *((helpers.ACTION_CHECKBOX_NAME, run_id) for run_id in request.POST.getlist(helpers.ACTION_CHECKBOX_NAME)),
        ],
        back_url=request.get_full_path(),
        extra_context={"every_match": filters or {gettext("every run"): True}},
    )
    return confirmation
