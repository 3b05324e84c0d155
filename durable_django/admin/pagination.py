"""The runs listing's paginator: exact counts up to a bound, the planner's estimate beyond it."""

from __future__ import annotations

import json
import math
from functools import cached_property
from typing import Any, cast

from django.core.paginator import Page, Paginator
from django.db.models import QuerySet


# Paginator is generic only in django-stubs: Django's class cannot be subscripted at run time.
class EstimatedCountPaginator(Paginator):  # type: ignore[type-arg]
    """Counts exactly up to a bound; beyond it, takes the planner's estimate.

    Django's paginator runs ``COUNT(*)`` over the filtered queryset, which reads
    every matching row; on millions of runs that is the slowest part of a page.
    Here a probe reads at most ``exact_up_to`` ids (no ordering, so PostgreSQL
    picks the cheapest index), and only when it fills up does ``EXPLAIN`` give
    the estimate, never less than the probe saw. Pages stop at ``max_pages`` so
    no page needs an offset deeper than that: older runs are reached by filters.
    """

    # The admin pages querysets (the changelist's).
    object_list: QuerySet[Any]

    exact_up_to = 1000
    max_pages = 100
    # Set by ``count``: whether it is PostgreSQL's estimate rather than exact.
    estimated = False

    @cached_property
    def count(self) -> int:
        probe = len(self.object_list.order_by().values_list("pk", flat=True)[: self.exact_up_to])
        self.estimated = probe >= self.exact_up_to
        if not self.estimated:
            return probe
        plan = json.loads(self.object_list.order_by().explain(format="json"))
        return max(int(plan[0]["Plan"]["Plan Rows"]), probe)

    def page(self, number: int | str) -> Page[Any]:
        """The page's rows in two statements: their ids in listing order, then those rows by primary key.

        Asked for every column at once, the planner weighs each index by the table rows it must visit, and
        under a filter the listing index does not hold (a function) it takes the matches for evenly spread:
        it read the listing index backward past every newer run of other functions (a backlog of a million
        runs of one function made a page of another take 913 ms). Asked for ids alone, the index that holds
        the filter's column answers from the index.
        """
        page = super().page(number)  # Django's bounds (orphans included); its slice is not read yet
        sliced = cast("QuerySet[Any]", page.object_list)
        ids = list(sliced.values_list("pk", flat=True))
        page.object_list = self.object_list.filter(pk__in=ids)
        return page

    @cached_property
    def num_pages(self) -> int:
        if self.count == 0 and not self.allow_empty_first_page:
            return 0
        hits = max(1, self.count - self.orphans)
        return min(math.ceil(hits / self.per_page), self.max_pages)

    @property
    def truncated(self) -> bool:
        """More rows match than the pages reach."""
        return self.count > self.max_pages * self.per_page
