"""The ground package's layers, read from its imports: no module imports a layer above its own.

The order is the one docs/ARCHITECTURE.md draws. Every `import` of the package is read with
`ast` (late imports inside functions too); relative imports are resolved against the module.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "ground" / "skymemory"

# lowest first; parts on one line share a level and never import each other
LAYERS = [
    {"skymemory", "argtypes", "extras", "_native", "_cffi_build"},  # "skymemory": the root, which defines nothing
    {"orbit"},
    {"protocol"},
    {"link"},
    {"store"},
    {"kv"},
    {"launcher", "integrations"},
    {"dashboard", "route"},
    {"bench"},
    {"cli"},
    {"__main__"},
]
LEVEL = {part: level for level, parts in enumerate(LAYERS) for part in parts}


def _part(dotted: str) -> str | None:
    """'skymemory.store.contract' -> 'store'; None for names outside the package."""
    names = dotted.split(".")
    if names[0] != "skymemory":
        return None
    return names[1] if len(names) > 1 and names[1] != "__init__" else "skymemory"


def _imports(path: Path) -> list[tuple[int, str]]:
    module = ".".join(("skymemory", *path.relative_to(PACKAGE).with_suffix("").parts))
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target == "skymemory":  # from skymemory import x: x is the part
                found += [(node.lineno, f"skymemory.{alias.name}") for alias in node.names]
            else:
                found.append((node.lineno, target))
    return found


def _modules():
    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_module_imports_a_higher_layer(path):
    own = _part(".".join(("skymemory", *path.relative_to(PACKAGE).with_suffix("").parts)))
    assert own in LEVEL, f"{path.relative_to(PACKAGE)} belongs to no layer: add it to LAYERS and ARCHITECTURE.md"
    for line, target in _imports(path):
        part = _part(target)
        if part is None or part == own:
            continue
        assert part in LEVEL, f"{path.name}:{line} imports {target}, which belongs to no layer"
        assert LEVEL[part] < LEVEL[own], (f"{path.relative_to(PACKAGE)}:{line} imports {target}: layer {part} "
                                          f"is not below {own}")


def test_the_layers_named_here_are_the_packages_that_exist():
    parts = {p.stem if p.is_file() else p.name for p in PACKAGE.iterdir()
             if (p.is_dir() and (p / "__init__.py").exists()) or (p.suffix == ".py" and p.stem != "__init__")}
    assert parts <= set(LEVEL), parts - set(LEVEL)
