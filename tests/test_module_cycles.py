"""No circle among the files of a runtime (the native node, the cFS apps SKYMEM and ISL_ROUTER) nor
among those of skymem_core, the library below them.

A circle (file A needs B and B needs A, directly or through others) means no file of it can be
read, tested or replaced alone; issue 25 found them around each app's global state and the node's
log and clocks. How this test decides, for each runtime's own files (those under its folder):

- headers: `gcc -MM -MG` of each of its headers lists every header it pulls in, directly or not
  (-MG names a header it cannot find, cFE's, instead of failing). Two of the runtime's own headers
  that each pull in the other are a circle.
- symbols: each .c file compiled to an object; `nm` says which global symbols each object defines
  and which it uses (U). Object A depends on object B when A uses a symbol B defines; a cycle in
  that graph (depth-first search) is a circle, reported as its files and the symbols that join them.

The native node and skymem_core (all but skymem_core_lib.c, cFE's entry point) are compiled here.
The cFS apps need cFE's headers to compile, so their objects come
from a built mission: SKYMEM_CFS_EXE names its build/exe/cpu1 (as tests/integration does); without
it their symbol check is skipped and their header check still runs. The detector itself is checked
on two files made into a circle, so a broken detector cannot pass silently.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CORE = ROOT / "cfs_apps/skymem_core"
CORE_INC = CORE / "fsw/inc"
NODE = ROOT / "cfs_apps/skymem_node/src"
SKYMEM = ROOT / "cfs_apps/skymem"
ISL = ROOT / "cfs_apps/isl_router"

# runtime: (its folder, the include folders its sources are compiled with)
RUNTIMES = {
    "skymem_node": (NODE, [NODE, CORE_INC]),
    "SKYMEM": (SKYMEM, [SKYMEM / "fsw/src", SKYMEM / "fsw/inc", SKYMEM / "config", CORE_INC]),
    "ISL_ROUTER": (ISL, [ISL / "fsw/src", ISL / "fsw/inc", ISL / "config", SKYMEM / "config", CORE_INC]),
    "skymem_core": (CORE, [CORE / "fsw/src", CORE_INC]),
}
# where a mission build keeps each cFS app's objects: build/native/<target>/apps/<app>/CMakeFiles/<app>.dir
CFS_OBJECT_DIRS = {"SKYMEM": "skymem.dir", "ISL_ROUTER": "isl_router.dir"}

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None or shutil.which("nm") is None,
                                reason="needs gcc and nm")


def header_circles(own: Path, include_dirs: list[Path]) -> list[tuple[str, str]]:
    """Pairs of the runtime's own headers that pull each other in."""
    flags = [f"-I{d}" for d in include_dirs]
    reach: dict[Path, set[Path]] = {}
    for h in sorted(own.rglob("*.h")):
        out = subprocess.run(["gcc", "-MM", "-MG", *flags, "-x", "c", str(h)], capture_output=True, text=True,
                             check=True, timeout=60).stdout
        deps = out.replace("\\\n", " ").split(":", 1)[1].split()
        reach[h] = {(h.parent / d).resolve() if not os.path.isabs(d) else Path(d).resolve() for d in deps[1:]}
    mine = set(reach)
    return sorted({tuple(sorted((a.name, b.name))) for a in mine for b in reach[a] & mine
                   if b != a and a in reach.get(b, ())})


def symbol_graph(objects: list[Path]) -> dict[str, dict[str, set[str]]]:
    """object -> {object it depends on -> the symbols it uses from it}."""
    defines: dict[str, str] = {}
    uses: dict[str, set[str]] = {}
    for o in objects:
        name = o.name.removesuffix(".o").removesuffix(".c")
        uses[name] = set()
        out = subprocess.run(["nm", str(o)], capture_output=True, text=True, check=True, timeout=60).stdout
        for line in out.splitlines():
            parts = line.split()
            if len(parts) == 3 and parts[1] in "TDBRCGSV":
                defines[parts[2]] = name
            elif len(parts) == 2 and parts[0] == "U":
                uses[name].add(parts[1])
    graph: dict[str, dict[str, set[str]]] = {n: {} for n in uses}
    for n, syms in uses.items():
        for s in syms:
            if s in defines and defines[s] != n:
                graph[n].setdefault(defines[s], set()).add(s)
    return graph


def find_cycle(graph: dict[str, dict[str, set[str]]]) -> list[str] | None:
    """One cycle of the graph as [a, b, ..., a], or None (depth-first search, three colours)."""
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        path.append(n)
        for m in sorted(graph.get(n, {})):
            if state.get(m) == 1:
                return path[path.index(m):] + [m]
            if state.get(m) is None:
                found = visit(m)
                if found:
                    return found
        state[n] = 2
        path.pop()
        return None

    for n in sorted(graph):
        if state.get(n) is None:
            found = visit(n)
            if found:
                return found
    return None


def describe(graph: dict[str, dict[str, set[str]]], cycle: list[str]) -> str:
    return "; ".join(f"{a} -> {b} ({', '.join(sorted(graph[a][b])[:3])})" for a, b in zip(cycle, cycle[1:]))


def compile_objects(sources: list[Path], include_dirs: list[Path], out: Path) -> list[Path]:
    objects = []
    for c in sources:
        o = out / (c.name + ".o")
        subprocess.run(["gcc", "-c", "-D_GNU_SOURCE", *[f"-I{d}" for d in include_dirs], str(c), "-o", str(o)],
                       check=True, capture_output=True, timeout=120)
        objects.append(o)
    return objects


@pytest.mark.parametrize("runtime", sorted(RUNTIMES))
def test_no_header_circle(runtime):
    own, include_dirs = RUNTIMES[runtime]
    assert header_circles(own, include_dirs) == []


def test_no_circle_between_the_native_nodes_files(tmp_path):
    own, include_dirs = RUNTIMES["skymem_node"]
    graph = symbol_graph(compile_objects(sorted(own.glob("*.c")), include_dirs, tmp_path))
    assert len(graph) >= 8  # every file of the node was looked at
    cycle = find_cycle(graph)
    assert cycle is None, f"the node's files form a circle: {describe(graph, cycle)}"


def core_circle(core: Path, objdir: Path) -> str | None:
    """The circle among a skymem_core tree's portable files (fsw/src, as the native build compiles them), or None."""
    sources = sorted(c for c in (core / "fsw/src").glob("*.c") if c.name != "skymem_core_lib.c")  # needs cFE
    graph = symbol_graph(compile_objects(sources, [core / "fsw/src", core / "fsw/inc"], objdir))
    assert len(sources) >= 11 and len(graph) == len(sources)  # every portable file of the core was looked at
    cycle = find_cycle(graph)
    return describe(graph, cycle) if cycle else None


def test_no_circle_between_the_cores_files(tmp_path):
    circle = core_circle(CORE, tmp_path)
    assert circle is None, f"skymem_core's files form a circle: {circle}"


@pytest.mark.parametrize("runtime", sorted(CFS_OBJECT_DIRS))
def test_no_circle_between_a_cfs_apps_files(runtime):
    exe = os.environ.get("SKYMEM_CFS_EXE")
    if not exe:
        pytest.skip("set SKYMEM_CFS_EXE to a cFS build's exe/cpu1 directory with the SkyMemory apps")
    build = Path(exe).resolve().parents[1]  # <mission>/build/exe/cpu1 -> <mission>/build
    objects = sorted(p for p in build.rglob("*.o") if f"/CMakeFiles/{CFS_OBJECT_DIRS[runtime]}/" in str(p))
    own = RUNTIMES[runtime][0]
    assert len(objects) == len(list((own / "fsw/src").glob("*.c"))), f"{runtime}'s objects not all found under {build}"
    graph = symbol_graph(objects)
    cycle = find_cycle(graph)
    assert cycle is None, f"{runtime}'s files form a circle: {describe(graph, cycle)}"


def test_the_detector_finds_a_circle(tmp_path):
    """Two files that call each other and include each other's header: both checks say so."""
    (tmp_path / "a.h").write_text('#ifndef A_H\n#define A_H\n#include "b.h"\nint a(int);\n#endif\n')
    (tmp_path / "b.h").write_text('#ifndef B_H\n#define B_H\n#include "a.h"\nint b(int);\n#endif\n')
    (tmp_path / "a.c").write_text('#include "a.h"\nint a(int x) { return x ? b(x - 1) : 0; }\n')
    (tmp_path / "b.c").write_text('#include "b.h"\nint b(int x) { return a(x); }\n')
    (tmp_path / "c.c").write_text('#include "a.h"\nint c(void) { return a(1); }\n')
    assert header_circles(tmp_path, [tmp_path]) == [("a.h", "b.h")]
    objdir = tmp_path / "o"
    objdir.mkdir()
    graph = symbol_graph(compile_objects(sorted(tmp_path.glob("*.c")), [tmp_path], objdir))
    cycle = find_cycle(graph)
    assert cycle is not None and set(cycle) == {"a", "b"}
    assert "a -> b (b)" in describe(graph, cycle) or "b -> a (a)" in describe(graph, cycle)
