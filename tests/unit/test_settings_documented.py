"""Every DURABLE setting the code reads has a row in docs/settings.md, and every row names a real setting."""

import os
import re

from durable_django.conf import DurableSettings
from tests.helpers import ROOT


def test_every_setting_is_documented_and_every_documented_setting_exists():
    with open(os.path.join(ROOT, "docs", "settings.md")) as handle:
        documented = set(re.findall(r"^\| `([A-Z_]+)` \|", handle.read(), flags=re.MULTILINE))
    defined = {name for name in vars(DurableSettings) if name.isupper()}
    assert defined and documented == defined
