"""The README is the package's front page on PyPI, where a relative link or image leads nowhere."""

import os
import re

from tests.helpers import ROOT

LINK_TARGET = re.compile(r"\]\(([^)\s]+)")


def test_the_readme_links_and_images_only_to_absolute_addresses_or_its_own_headings():
    with open(os.path.join(ROOT, "README.md")) as readme:
        targets = LINK_TARGET.findall(readme.read())
    assert [target for target in targets if not target.startswith(("https://", "http://", "#"))] == []
