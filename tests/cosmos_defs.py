"""Reading the generated COSMOS definitions back, as a test's independent second reader.

`packets()` parses every file of cfs_apps/cosmos/targets/SKYMEM/cmd_tlm into
CosmosPacket objects (the keywords the generator writes: COMMAND, TELEMETRY,
[ID_]PARAMETER, [ID_]ITEM, STATE, FORMAT_STRING); `decode` reads a packet's
fields out of raw bytes the way COSMOS would, `encode_defaults` builds the
command COSMOS sends when no parameter is changed.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CMD_TLM = REPO / "cfs_apps" / "cosmos" / "targets" / "SKYMEM" / "cmd_tlm"


@dataclass
class CosmosField:
    name: str
    bit_offset: int
    bits: int
    kind: str  # UINT or STRING
    endian: str
    id_value: int | str | None = None
    default: int | None = None
    states: dict[str, int] = field(default_factory=dict)


@dataclass
class CosmosPacket:
    kind: str  # COMMAND or TELEMETRY
    name: str
    fields: list[CosmosField]

    def field(self, name: str) -> CosmosField:
        return next(f for f in self.fields if f.name == name)

    @property
    def length(self) -> int:
        return max(f.bit_offset + f.bits for f in self.fields) // 8


def _int(text: str) -> int:
    return int(text, 0)


def parse(path: Path) -> list[CosmosPacket]:
    out: list[CosmosPacket] = []
    for lineno, line in enumerate(path.read_text().splitlines(), 1):
        words = shlex.split(line, comments=True)
        if not words:
            continue
        key, args = words[0], words[1:]
        where = f"{path.name}:{lineno}"
        if key in ("COMMAND", "TELEMETRY"):
            assert args[0] == "<%=" and args[2] == "%>", f"{where}: target name is not the installed one"
            out.append(CosmosPacket(key, args[3], []))
        elif key in ("PARAMETER", "ID_PARAMETER"):
            name, off, bits, kind, lo, hi, default, _desc, endian = args
            f = CosmosField(name, int(off), int(bits), kind, endian, default=_int(default))
            if key == "ID_PARAMETER":
                f.id_value = _int(default)
            out[-1].fields.append(f)
        elif key == "ITEM":
            name, off, bits, kind, _desc, endian = args
            out[-1].fields.append(CosmosField(name, int(off), int(bits), kind, endian))
        elif key == "ID_ITEM":
            name, off, bits, kind, ident, _desc, endian = args
            out[-1].fields.append(CosmosField(name, int(off), int(bits), kind, endian,
                                              id_value=ident if kind == "STRING" else _int(ident)))
        elif key == "STATE":
            out[-1].fields[-1].states[args[0]] = _int(args[1])
        elif key != "FORMAT_STRING":
            raise AssertionError(f"{where}: keyword {key} is not one the generator writes")
    return out


def packets() -> dict[str, CosmosPacket]:
    return {p.name: p for path in sorted(CMD_TLM.glob("*.txt")) for p in parse(path)}


def decode(p: CosmosPacket, data: bytes) -> dict[str, int | str]:
    """Every field's value, read from data as COSMOS reads it."""
    assert len(data) == p.length, f"{p.name} is {p.length} bytes, the packet {len(data)}"
    values: dict[str, int | str] = {}
    for f in p.fields:
        assert f.bit_offset % 8 == 0 and f.bits % 8 == 0, f"{p.name}.{f.name} is not byte aligned"
        raw = data[f.bit_offset // 8:(f.bit_offset + f.bits) // 8]
        if f.kind == "STRING":
            values[f.name] = raw.split(b"\0", 1)[0].decode()
        else:
            values[f.name] = int.from_bytes(raw, "big" if f.endian == "BIG_ENDIAN" else "little")
    return values


def encode_defaults(p: CosmosPacket) -> bytes:
    buf = bytearray(p.length)
    for f in p.fields:
        buf[f.bit_offset // 8:(f.bit_offset + f.bits) // 8] = f.default.to_bytes(
            f.bits // 8, "big" if f.endian == "BIG_ENDIAN" else "little")
    return bytes(buf)
