"""docs/CFS.md is a procedure: its mission-preparation commands run as written.

The shell blocks of the section "Adding the modules to a mission" are run literally with bash
in a stand-in of a checked-out nasa/cFS v7.0.0 bundle (the folders and files of the real
layout: cfe/cmake/Makefile.sample, cfe/cmake/sample_defs/, apps/<lab app>/fsw/tables/, osal,
psp, tools/...; the files that the steps read or edit carry the lines of the real ones).
Then what a cFS build would read is checked: cmake evaluates targets.cmake, the startup
script names every app as its table does, and the preprocessor resolves the table fragments
inside the lab apps' tables. No cFS code is involved.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "CFS.md"
SECTION = "## Adding the modules to a mission"

_FENCE = re.compile(r"^( *)```(\w*)\n(.*?)^\1```", re.M | re.S)

# The stock v7.0.0 startup script (cfe/cmake/sample_defs/cpu1_cfe_es_startup.scr), its app lines
STOCK_STARTUP = """\
CFE_LIB, cfe_assert,  CFE_Assert_LibInit, ASSERT_LIB,    0,   0,     0x0, 0;
CFE_LIB, sample_lib,  SAMPLE_LIB_Init,    SAMPLE_LIB,    0,   0,     0x0, 0;
CFE_APP, sample_app,  SAMPLE_APP_Main,    SAMPLE_APP,   50,   16384, 0x0, 0;
CFE_APP, ci_lab,      CI_LAB_AppMain,     CI_LAB,       60,   16384, 0x0, 0;
CFE_APP, to_lab,      TO_LAB_AppMain,     TO_LAB,       70,   16384, 0x0, 0;
CFE_APP, sch_lab,     SCH_LAB_AppMain,    SCH_LAB,      80,   16384, 0x0, 0;
!
! Startup script fields:
! 1. Object Type      -- CFE_APP for an Application, or CFE_LIB for a library.
"""

# The stock targets.cmake's definitions (comments left out)
STOCK_TARGETS = """\
SET(MISSION_NAME "SampleMission")
SET(SPACECRAFT_ID 0x42)
list(APPEND MISSION_GLOBAL_APPLIST sample_app sample_lib)
SET(FT_INSTALL_SUBDIR "host/functional-test")
SET(MISSION_CPUNAMES cpu1)
SET(cpu1_PROCESSORID 1)
SET(cpu1_APPLIST ci_lab to_lab sch_lab)
SET(cpu1_FILELIST cfe_es_startup.scr)
"""


def to_lab_table(app: str) -> str:
    """to_lab's fsw/tables/to_lab_sub.c, its layout kept, cFE's headers left out (so it preprocesses alone)."""
    return f"""\
TO_LAB_Subs_t TO_LAB_Subs = {{.Subs = {{/* CFS App Subscriptions */
                                      {{CFE_SB_MSGID_WRAP_VALUE(TO_LAB_HK_TLM_MID), {{0, 0}}, 4}},
                                      {{CFE_SB_MSGID_WRAP_VALUE(CFE_ES_HK_TLM_MID), {{0, 0}}, 4}},

                                      /* CFE_SB_MSGID_RESERVED entry to mark the end of valid MsgIds */
                                      {{CFE_SB_MSGID_RESERVED, {{0, 0}}, 0}}}}}};

CFE_TBL_FILEDEF(TO_LAB_Subs, {app}.TO_LAB_Subs, TO Lab Sub Tbl, to_lab_sub.tbl)
"""


def sch_lab_table(app: str) -> str:
    """sch_lab's fsw/tables/sch_lab_table.c, the same way."""
    return f"""\
SCH_LAB_ScheduleTable_t SCH_LAB_ScheduleTable = {{
    .TickRate = 100,
    .Config   = {{
        {{CFE_SB_MSGID_WRAP_VALUE(CFE_ES_SEND_HK_MID), 100, 0}}, /* Example of a 1hz packet */
        {{CFE_SB_MSGID_WRAP_VALUE(CFE_TBL_SEND_HK_MID), 50, 0}},

    }}}};

CFE_TBL_FILEDEF(SCH_LAB_ScheduleTable, {app}.ScheduleTable, Schedule Lab MsgID Table, sch_lab_table.tbl)
"""


def stand_in_bundle(root: Path, lab_suffix: str) -> Path:
    """A checked-out cFS bundle's layout after `git submodule update --init`; lab_suffix "_APP" gives the
    lab apps' tables the names of their main branches (TO_LAB_APP.TO_LAB_Subs), "" the names of the stock
    startup script."""
    cfs = root / "cFS"
    defs = cfs / "cfe" / "cmake" / "sample_defs"
    defs.mkdir(parents=True)
    (cfs / "cfe" / "cmake" / "Makefile.sample").write_text("# cFE's sample top-level Makefile\n")
    (defs / "targets.cmake").write_text(STOCK_TARGETS)
    (defs / "cpu1_cfe_es_startup.scr").write_text(STOCK_STARTUP)
    for name in ("default_osconfig.cmake", "native_osconfig.cmake", "global_build_options.cmake",
                 "example_mission_cfg.h", "example_platform_cfg.h"):
        (defs / name).write_text(f"# {name}\n")
    for d in ("osal", "psp", "apps/ci_lab/fsw/src", "apps/sample_app/fsw/src", "libs/sample_lib/fsw/src",
              "tools/cFS-GroundSystem/Subsystems/cmdUtil", "tools/elf2cfetbl", "tools/tblCRCTool"):
        (cfs / d).mkdir(parents=True)
    (cfs / "apps/to_lab/fsw/tables").mkdir(parents=True)
    (cfs / "apps/to_lab/fsw/tables/to_lab_sub.c").write_text(to_lab_table("TO_LAB" + lab_suffix))
    (cfs / "apps/sch_lab/fsw/tables").mkdir(parents=True)
    (cfs / "apps/sch_lab/fsw/tables/sch_lab_table.c").write_text(sch_lab_table("SCH_LAB" + lab_suffix))
    return cfs


def section_commands(doc: str, heading: str) -> str:
    """The ```sh blocks of one section of the doc (up to the next "## " heading), dedented, in order."""
    start = doc.index(heading + "\n")
    end = doc.find("\n## ", start + len(heading))
    body = doc[start:end if end >= 0 else len(doc)]
    blocks = [textwrap.dedent(m.group(3)) for m in _FENCE.finditer(body) if m.group(2) == "sh"]
    assert blocks, f"no ```sh block under {heading!r} in {DOC}"
    return "\n".join(blocks)


def startup_apps(scr: Path) -> list[tuple[str, str]]:
    """(file, cFE name) of each line of a startup script, in order, up to its '!' end marker."""
    apps = []
    for line in scr.read_text().splitlines():
        if line.startswith("!"):
            break
        fields = [f.strip() for f in line.rstrip(";").split(",")]
        apps.append((fields[1], fields[3]))
    return apps


def table_prefix(source: Path) -> str:
    """The application name a table source's CFE_TBL_FILEDEF gives its table (cFE must load it for that app)."""
    return re.search(r"CFE_TBL_FILEDEF\(\s*\w+\s*,\s*(\w+)\.", source.read_text()).group(1)


@pytest.mark.parametrize("lab_suffix", ["_APP", ""], ids=["lab-tables-named-APP", "lab-tables-stock-names"])
def test_mission_preparation_runs_as_written(tmp_path, lab_suffix):
    cfs = stand_in_bundle(tmp_path, lab_suffix)
    script = section_commands(DOC.read_text(), SECTION)
    r = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=cfs, capture_output=True, text=True,
                       timeout=60, env={"PATH": "/usr/bin:/bin", "SKYMEMORY": str(REPO)})
    assert r.returncode == 0, f"docs/CFS.md's commands fail as written:\n{r.stderr}"

    # step 2: the mission's Makefile and definitions are cFE's samples
    assert (cfs / "Makefile").read_text() == (cfs / "cfe/cmake/Makefile.sample").read_text()
    assert (cfs / "sample_defs/native_osconfig.cmake").is_file()

    # step 3: the modules are where cFE searches, built for cpu1 (as cmake reads targets.cmake) ...
    for module in ("skymem_core", "skymem", "isl_router"):
        assert (cfs / "apps" / module / "CMakeLists.txt").resolve() == REPO / "cfs_apps" / module / "CMakeLists.txt"
    if shutil.which("cmake"):
        probe = tmp_path / "probe.cmake"
        probe.write_text(f'include("{cfs}/sample_defs/targets.cmake")\nmessage("${{cpu1_APPLIST}}")\n')
        out = subprocess.run(["cmake", "-P", str(probe)], capture_output=True, text=True, timeout=30).stderr
        assert out.split() == ["ci_lab;to_lab;sch_lab;skymem_core;skymem;isl_router"]
    # ... and started library first, SKYMEM before ISL_ROUTER, both before CI_LAB
    apps = startup_apps(cfs / "sample_defs/cpu1_cfe_es_startup.scr")
    files = [f for f, _ in apps]
    assert files.index("skymem_core") < files.index("skymem") < files.index("isl_router") < files.index("ci_lab")
    names = dict(apps)
    assert names["skymem_core"] == "SKYMEM_CORE" and names["isl_router"] == "ISL_ROUTER"
    # every app named as its table is (cFE refuses "File for wrong table" otherwise)
    assert names["skymem"] == table_prefix(REPO / "cfs_apps/skymem/fsw/tables/skymem_tbl.c")
    assert names["to_lab"] == table_prefix(cfs / "apps/to_lab/fsw/tables/to_lab_sub.c") == "TO_LAB" + lab_suffix
    assert names["sch_lab"] == table_prefix(cfs / "apps/sch_lab/fsw/tables/sch_lab_table.c") == "SCH_LAB" + lab_suffix

    # step 4: the mission copies of the lab tables take in SkyMemory's entries, inside their lists
    tables = cfs / "sample_defs/tables"
    to_lab = preprocess(tables / "to_lab_sub.c")
    assert to_lab.index("0x0890") < to_lab.index("0x0893") < to_lab.index("CFE_SB_MSGID_RESERVED")
    assert to_lab.index("TO_LAB_HK_TLM_MID") < to_lab.index("0x0890")
    sch_lab = preprocess(tables / "sch_lab_table.c")
    assert sch_lab.index(".Config") < sch_lab.index("0x1891") < sch_lab.index("0x1894") < sch_lab.index("}};")


def preprocess(source: Path) -> str:
    """The table source as the compiler sees it: its #include resolved beside it, comments dropped."""
    if shutil.which("cpp") is None:
        pytest.skip("no C preprocessor (cpp) on this machine")
    r = subprocess.run(["cpp", "-P", str(source)], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_every_shell_block_of_the_doc_parses():
    """The commands a user pastes from anywhere in docs/CFS.md are at least valid shell."""
    doc = DOC.read_text()
    blocks = [textwrap.dedent(m.group(3)) for m in _FENCE.finditer(doc) if m.group(2) == "sh"]
    assert len(blocks) >= 8
    for block in blocks:
        r = subprocess.run(["bash", "-n"], input=block, capture_output=True, text=True, timeout=30)
        assert r.returncode == 0, f"{block}\n{r.stderr}"
