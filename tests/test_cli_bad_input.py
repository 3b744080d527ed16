"""Bad input is a sentence: every command, given a malformed manifest, a bad path or a bad number,
exits 1 or 2 with exactly one line on stderr and no traceback (issue 15).

The matrix runs `skymemory.cli.main` in this process (an exception escaping it is what a user
would see as a traceback); the examples the issue reported run as real subprocesses.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from skymemory.cli import main
from skymemory.orbit.manifest import Manifest, SatelliteEntry

REPO = Path(__file__).resolve().parents[1]


def _good_manifest() -> dict:
    sats = [SatelliteEntry(p, s, "127.0.0.1", 20000 + p * 2 + s, 40000 + p * 2 + s) for p in range(2) for s in range(2)]
    return json.loads(Manifest(planes=2, sats=2, satellites=sats).to_json())


def _malformed(tmp: Path) -> dict[str, Path]:
    """name -> a manifest file that must be refused with a sentence."""
    good = _good_manifest()
    first = good["satellites"][0]
    bodies = {
        "a list": "[]",
        "not JSON": "{planes: 2",
        "empty": "",
        "satellites a string": json.dumps({**good, "satellites": "x"}),
        "ground port 99999": json.dumps({**good, "satellites": [{**first, "ground_port": 99999}]
                                         + good["satellites"][1:]}),
        "planes 0": json.dumps({**good, "planes": 0}),
        "planes a string": json.dumps({**good, "planes": "2"}),
        "an unknown field": json.dumps({**good, "colour": "red"}),
        "another format": json.dumps({**good, "format_version": 7}),
        "too few satellites": json.dumps({**good, "satellites": good["satellites"][:3]}),
        "a satellite a number": json.dumps({**good, "satellites": [1, 2, 3, 4]}),
        "satellites out of order": json.dumps({**good, "satellites": good["satellites"][::-1]}),
        "time scale 0": json.dumps({**good, "time_scale": 0}),
        "a host missing": json.dumps({**good, "satellites": [{k: v for k, v in first.items() if k != "host"}]
                                      + good["satellites"][1:]}),
    }
    out = {}
    for i, (name, body) in enumerate(bodies.items()):
        path = tmp / f"manifest-{i}.json"
        path.write_text(body)
        out[name] = path
    out["missing"] = tmp / "nowhere.json"
    out["a directory"] = tmp
    return out


def _commands_with_manifest(tmp: Path) -> list[list[str]]:
    some_file = tmp / "object.bin"
    some_file.write_bytes(b"x" * 100)
    return [
        ["status"],
        ["put", str(some_file)],
        ["get", "object.bin", "-o", str(tmp / "copy.bin")],
        ["rotate", "--duration", "1"],
        ["telemetry", "record", "-o", str(tmp / "hk.bin")],
        ["telemetry", "listen", "--duration", "0.1"],
        ["dashboard", "--port", "0"],
    ]


def _bad_paths(tmp: Path) -> list[list[str]]:
    a_file = tmp / "a-file"
    a_file.write_text("not a directory")
    nowhere = "/nonexistent-dir/x.bin"
    return [
        ["get", "big.bin", "-o", nowhere],
        ["get", "big.bin", "-o", str(tmp)],
        ["get", "big.bin", "--capture", nowhere],
        ["put", str(tmp / "big.bin")],
        ["put", str(tmp)],
        ["telemetry", "decode", str(tmp / "none.bin")],
        ["telemetry", "record", "-o", nowhere],
        ["telemetry", "listen", "-o", nowhere],
        ["layout", "-o", "/nonexistent-dir/x.png"],
        ["sim", "sweep", "--out", str(a_file / "sub")],
        ["bench", "transfer", "--out", str(a_file)],
        ["bench", "rebuild", "--out", str(a_file)],
        ["bench", "streaming", "--node", str(tmp / "no-node")],
        ["bench", "dashboard", "--manifest", str(tmp / "none.json")],
        ["bench", "ttft", "--events", nowhere],
        ["demo", "--out", str(a_file / "sub")],
        ["dashboard", "--events", nowhere],
        ["model", "info", "--model", str(tmp / "no-model-here")],
    ]


BAD_NUMBERS = [
    ["status", "--timeout", "-1"],
    ["status", "--timeout", "nan"],
    ["put", "x", "--servers", "0"],
    ["get", "x", "--timeout", "abc"],
    ["put", "x", "--route", "sideways"],
    ["get", "x", "--pace-mbps", "-8"],
    ["delete", "x", "--timeout", "0"],
    ["rotate", "--duration", "0"],
    ["rotate", "--duration", "10", "--put-interval", "-1"],
    ["rotate", "--duration", "10", "--blocks", "0"],
    ["sim", "--servers", "0"],
    ["sim", "--altitude", "-5"],
    ["layout", "--planes", "0", "-o", "x.png"],
    ["telemetry", "decode", "x", "--limit", "-1"],
    ["telemetry", "record", "-o", "x", "--timeout", "0"],
    ["dashboard", "--port", "70000"],
    ["bench", "faults", "--planes", "0"],
    ["bench", "soak", "--loss", "2"],
    ["bench", "soak", "--minutes", "inf"],
    ["bench", "auth", "--ops", "0"],
    ["bench", "boot", "--servers", "-3"],
    ["bench", "dashboard", "--seconds", "-1"],
    ["bench", "transfer", "--sizes-mb", "0"],
    ["bench", "streaming", "--seed", "-1"],
    ["bench", "rebuild", "--repeats", "0"],
    ["bench", "ttft", "--prefix-tokens", "0"],
    ["demo", "--planes", "9999"],
    ["model", "info", "--block-tokens", "x"],
    ["nonsense"],
    [],
]


def _run(argv: list[str], capsys) -> tuple[int, list[str]]:
    capsys.readouterr()
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse
        code = exc.code
    err = capsys.readouterr().err
    return code, err.strip().splitlines()


def _assert_sentence(argv, code, lines) -> None:
    assert code in (1, 2), f"{argv}: exit {code}, stderr {lines}"
    assert len(lines) == 1, f"{argv}: want one line on stderr, got {lines}"
    assert "Traceback" not in lines[0], f"{argv}: {lines}"


def test_every_manifest_command_refuses_every_malformed_manifest_in_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("SKYMEM_MANIFEST", raising=False)
    seen = set()
    for name, manifest in _malformed(tmp_path).items():
        for argv in _commands_with_manifest(tmp_path):
            argv = argv + ["--manifest", str(manifest)]
            code, lines = _run(argv, capsys)
            _assert_sentence(argv, code, lines)
            assert "manifest" in lines[0], f"{argv}: the message should say it is the manifest: {lines}"
            seen.add(lines[0].split(": ", 1)[1])
    assert len(seen) >= len(_malformed(tmp_path)), "each kind of bad manifest gets its own message"


def test_the_manifest_message_names_the_field(tmp_path, capsys):
    m = _malformed(tmp_path)
    cases = {"a list": "must be a JSON object", "satellites a string": "satellites must be a list",
             "ground port 99999": "satellites[0].ground_port must be an integer in 1..65535, got 99999",
             "an unknown field": "colour is not a manifest field", "a host missing": "satellites[0].host is missing",
             "missing": "no manifest at"}
    for name, text in cases.items():
        code, lines = _run(["status", "--manifest", str(m[name])], capsys)
        assert code == 1 and text in lines[0], (name, lines)


@pytest.mark.parametrize("which", ["paths", "numbers"])
def test_bad_paths_and_numbers_are_one_line(which, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("SKYMEM_MANIFEST", raising=False)
    monkeypatch.chdir(tmp_path)
    for argv in (_bad_paths(tmp_path) if which == "paths" else BAD_NUMBERS):
        code, lines = _run(argv, capsys)
        _assert_sentence(argv, code, lines)


def test_the_reported_examples_as_subprocesses(tmp_path):
    """The cases of issue 15, through the real entry points."""
    (tmp_path / "list.json").write_text("[]")
    good = _good_manifest()
    (tmp_path / "port.json").write_text(json.dumps({**good, "satellites": [{**good["satellites"][0],
                                                                            "ground_port": 99999}]
                                                    + good["satellites"][1:]}))
    cli = [sys.executable, "-m", "skymemory"]
    launcher = [sys.executable, str(REPO / "tools" / "launch_constellation.py")]
    runs = [
        cli + ["status", "--manifest", str(tmp_path / "list.json")],
        cli + ["status", "--manifest", str(tmp_path / "port.json")],
        cli + ["get", "big.bin", "-o", "/nonexistent-dir/x.bin", "--manifest", str(tmp_path / "port.json")],
        launcher + ["stop", "--manifest", str(tmp_path / "list.json")],
        launcher + ["status", "--manifest", str(tmp_path / "port.json")],
    ]
    for argv in runs:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=tmp_path)
        lines = r.stderr.strip().splitlines()
        _assert_sentence(argv, r.returncode, lines)
