"""Every package's module index (the list in its `__init__.py` docstring) names every module on disk.

An index line is a module name followed by two or more spaces and what it is for
("  radix        the ground index ..."), or a bullet with the name in backticks
("* `poller` asks every satellite ..."); a folder that is not a module ends in "/".
Read from the files with `ast`, so no package is imported.
"""

from __future__ import annotations

import ast
import pkgutil
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "ground" / "skymemory"

# packages whose docstring is not an index of modules, and why
NO_INDEX = {
    "skymemory": "the root: docs/ARCHITECTURE.md draws its packages as layers",
    "skymemory.cli": "one module per subcommand, discovered (`skymemory --help` lists them)",
    "skymemory.launcher": "its docstring describes the command (start, stop, status); docs/CONTRACTS.md its modules",
}

ENTRY = re.compile(r"^\s*(?:\*\s+`(?P<quoted>[A-Za-z_]\w*/?)`\s+\S|(?P<bare>[A-Za-z_]\w*/?)\s{2,}\S)")


def _packages() -> list[tuple[str, Path]]:
    found = []
    for init in sorted(PACKAGE.rglob("__init__.py")):
        folder = init.parent
        found.append((".".join(("skymemory", *folder.relative_to(PACKAGE).parts)), folder))
    return found


def listed(docstring: str) -> set[str]:
    """The names an index docstring lists (a folder with its trailing "/")."""
    names = set()
    for line in docstring.splitlines():
        match = ENTRY.match(line)
        if match:
            names.add(match["quoted"] or match["bare"])
    return names


def on_disk(folder: Path) -> set[str]:
    """The package's public modules and subpackages (a leading underscore marks one private)."""
    return {info.name for info in pkgutil.iter_modules([str(folder)]) if not info.name.startswith("_")}


def test_the_index_reader_finds_both_layouts():
    doc = "What it is for.\n\n  radix        the index\n* `poller` asks\n* `static/`     the page\nNot an entry.\n"
    assert listed(doc) == {"radix", "poller", "static/"}


@pytest.mark.parametrize("name,folder", _packages(), ids=[name for name, _ in _packages()])
def test_the_package_index_lists_every_module(name, folder):
    if name in NO_INDEX:
        pytest.skip(NO_INDEX[name])
    docstring = ast.get_docstring(ast.parse((folder / "__init__.py").read_text())) or ""
    names = listed(docstring)
    missing = sorted(on_disk(folder) - names)
    assert not missing, f"{name}'s docstring does not list its modules {missing}"
    stale = sorted(n for n in names if not (folder / n).is_dir() and n not in on_disk(folder))
    assert not stale, f"{name}'s docstring lists {stale}, which are not in {folder}"
