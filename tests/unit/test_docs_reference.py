"""The documentation's reference names every public name: a name added to ``__all__`` without a line in
docs/reference.md would be missing from the site."""

import os
import re

import durable_django
from tests.helpers import ROOT


def test_every_public_name_has_an_entry_in_the_reference():
    with open(os.path.join(ROOT, "docs", "reference.md")) as reference:
        documented = set(re.findall(r"^\.\. auto(?:function|class):: durable_django\.(\w+)$", reference.read(), re.M))
    assert sorted(set(durable_django.__all__) - documented) == []
