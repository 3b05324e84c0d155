"""The shipped translations are complete and current: every text a fresh ``makemessages`` extracts from the
package is in each ``django.po``, translated and not fuzzy, and the committed ``django.mo`` says what the
``.po`` says (users without GNU gettext load the ``.mo`` as it is).

``makemessages`` needs GNU gettext (``apt-get install gettext``): without it that test skips, except in CI
(``CI`` set), where it fails.
"""

import ast
import gettext
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "durable_django"
LOCALES = sorted(path.name for path in (PACKAGE / "locale").iterdir() if path.is_dir())
_KEYWORD = re.compile(r'^(msgctxt|msgid|msgid_plural|msgstr(?:\[(\d+)\])?) (".*")$')


@dataclass
class Entry:
    context: str | None
    msgid: str
    plural: str | None
    translations: dict[int, str]
    fuzzy: bool

    @property
    def key(self) -> tuple[str | None, str, str | None]:
        return self.context, self.msgid, self.plural


def read_po(path: Path) -> list[Entry]:
    """The active entries of a PO file (the header and obsolete ``#~`` entries left out)."""
    entries: list[Entry] = []
    for block in re.split(r"\n\s*\n", path.read_text(encoding="utf-8")):
        fields: dict[str, list[str]] = {}
        current = None
        fuzzy = False
        for line in block.strip().splitlines():
            if line.startswith("#,") and "fuzzy" in line:
                fuzzy = True
            if line.startswith("#"):
                continue
            match = _KEYWORD.match(line)
            if match:
                current = match.group(1)
                fields[current] = [match.group(3)]
            elif line.startswith('"') and current is not None:
                fields[current].append(line)
        if "msgid" not in fields:
            continue
        text = {name: "".join(ast.literal_eval(part) for part in parts) for name, parts in fields.items()}
        if text["msgid"] == "":
            continue  # the header
        translations = {
            int(name[7:-1]) if name.startswith("msgstr[") else 0: value
            for name, value in text.items()
            if name.startswith("msgstr")
        }
        entries.append(Entry(text.get("msgctxt"), text["msgid"], text.get("msgid_plural"), translations, fuzzy))
    return entries


def po_path(root: Path, locale: str) -> Path:
    return root / "locale" / locale / "LC_MESSAGES" / "django.po"


def test_a_locale_ships():
    assert "fr" in LOCALES


@pytest.mark.parametrize("locale", LOCALES)
def test_every_entry_is_translated_and_none_is_fuzzy(locale):
    entries = read_po(po_path(PACKAGE, locale))
    assert len(entries) > 300, "the catalog holds the admin's and the commands' texts"
    untranslated = [entry.msgid for entry in entries if not all(entry.translations.values())]
    fuzzy = [entry.msgid for entry in entries if entry.fuzzy]
    assert not untranslated and not fuzzy, f"untranslated: {untranslated}; fuzzy: {fuzzy}"
    plural_forms = [entry for entry in entries if entry.plural is not None]
    assert plural_forms and all(len(entry.translations) >= 2 for entry in plural_forms)


@pytest.mark.parametrize("locale", LOCALES)
def test_the_compiled_catalog_says_what_the_po_says(locale):
    directory = PACKAGE / "locale" / locale / "LC_MESSAGES"
    with open(directory / "django.mo", "rb") as compiled:
        catalog = gettext.GNUTranslations(compiled)._catalog
    expected: dict[object, str] = {}
    for entry in read_po(directory / "django.po"):
        msgid = entry.msgid if entry.context is None else f"{entry.context}\x04{entry.msgid}"
        if entry.plural is None:
            expected[msgid] = entry.translations[0]
        else:
            expected.update({(msgid, index): text for index, text in entry.translations.items()})
    compiled_entries = {key: value for key, value in catalog.items() if key != ""}
    assert compiled_entries == expected, "compile the catalog again: msgfmt -o django.mo django.po"


def gettext_tools() -> None:
    missing = [tool for tool in ("xgettext", "msgmerge", "msguniq") if shutil.which(tool) is None]
    if missing:
        reason = f"GNU gettext is not installed ({', '.join(missing)} missing; apt-get install gettext)"
        if os.environ.get("CI"):
            pytest.fail(f"{reason}; CI must check the translations")
        pytest.skip(reason)


@pytest.mark.parametrize("locale", LOCALES)
def test_a_fresh_makemessages_finds_nothing_new(locale, tmp_path):
    """``makemessages`` run on a copy of the package adds no entry, retires none, and leaves none untranslated."""
    gettext_tools()
    copy = tmp_path / "durable_django"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__", "*.mo"))
    environment = {key: value for key, value in os.environ.items() if key != "DJANGO_SETTINGS_MODULE"}
    result = subprocess.run(
        # -P: the copy holds modules named like the standard library's (types.py), so its directory stays off sys.path.
        [sys.executable, "-P", "-m", "django", "makemessages", "--locale", locale],
        cwd=copy,
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    shipped = {entry.key for entry in read_po(po_path(PACKAGE, locale))}
    fresh = read_po(po_path(copy, locale))
    added = sorted({entry.key for entry in fresh} - shipped, key=str)
    retired = sorted(shipped - {entry.key for entry in fresh}, key=str)
    assert not added and not retired, f"run makemessages -l {locale} and translate: new {added}, gone {retired}"
    untranslated = [entry.msgid for entry in fresh if entry.fuzzy or not all(entry.translations.values())]
    assert not untranslated, untranslated
