#!/usr/bin/env python3
"""Generate the ground-system files of the SKYMEM and ISL_ROUTER cFS apps from their C headers.

    make cosmos          (= python3 tools/generate_cosmos.py)

Reads the one definition of every message -- `skymem_wire.h` (message IDs,
function codes, payload offsets with their types in the trailing comments),
the apps' `default_*_msgstruct.h` / `default_*_msgdefs.h` (which commands and
telemetry packets exist and what their payloads are) and `*_eventids.h` -- and
writes, never to be edited by hand:

  cfs_apps/cosmos/                    an OpenC3 COSMOS plugin (target SKYMEM):
    plugin.txt, openc3-cosmos-skymem.gemspec,
    targets/SKYMEM/target.txt, targets/SKYMEM/cmd_tlm/{skymem,isl_router}_{cmd,tlm}_def.txt
  cfs_apps/mission_tables/            fragments a mission includes in the lab apps' tables:
    to_lab_skymem_subs.inc            TO_LAB subscriptions for both apps' housekeeping
    sch_lab_skymem_hk.inc             SCH_LAB entries that ask for it once a second

Every field gets an explicit bit offset, size and byte order; tests/test_cosmos_defs.py
checks them against the C compiler and against housekeeping of a live node.
Only the standard library is used. A header the generator cannot read is an
error that names the header and the line, never a silently short file.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
APPS = REPO / "cfs_apps"
WIRE_H = APPS / "skymem_core/fsw/inc/skymem_wire.h"
APP_HEADERS = {  # app -> (msgstruct, msgdefs, eventids)
    "SKYMEM": ("skymem/config/default_skymem_msgstruct.h", "skymem/config/default_skymem_msgdefs.h",
               "skymem/fsw/inc/skymem_eventids.h"),
    "ISL_ROUTER": ("isl_router/config/default_isl_router_msgstruct.h",
                   "isl_router/config/default_isl_router_msgdefs.h", "isl_router/fsw/inc/isl_router_eventids.h"),
}
# A payload that is one opaque byte array of a wire-format body: its fields are the
# skymem_wire.h offsets with this prefix (the array's length macro says which body it is).
BODY_FIELDS = {"SKYMEM_STATS_LEN": "SKYMEM_ST_", "ISL_ROUTER_HK_LEN": "ISL_ROUTER_HK_"}

COSMOS_DIR = APPS / "cosmos"
TABLES_DIR = APPS / "mission_tables"
TARGET = "SKYMEM"
TARGET_NAME = "<%= target_name %>"  # COSMOS puts the name the target was installed under here
COMMAND = "`make cosmos` (python3 tools/generate_cosmos.py)"

# cFE v7 facts the headers of this project do not hold (default message configuration):
# command header 8 bytes, telemetry header 16; the long event message (CFE_EVS_LONG_EVENT_MSG_MID
# 0x0808) carries AppName[20], EventID u16, EventType u16, SpacecraftID u32, ProcessorID u32,
# Message[122], two spare bytes, as native (little-endian on x86) C structs.
EVS_LONG_EVENT_MID = 0x0808
EVS_LONG_EVENT_PAYLOAD = [  # (name, bytes, type, description)
    ("APP_NAME", 20, "STRING", "Application name"),
    ("EVENT_ID", 2, "UINT", "Event ID"),
    ("EVENT_TYPE", 2, "UINT", "Event type"),
    ("SPACECRAFT_ID", 4, "UINT", "Spacecraft ID"),
    ("PROCESSOR_ID", 4, "UINT", "Processor ID (the PSP's --cpuid)"),
    ("MESSAGE", 122, "STRING", "Event text"),
    ("SPARE1", 1, "UINT", "Spare"),
    ("SPARE2", 1, "UINT", "Spare"),
]
EVS_EVENT_TYPES = [("DEBUG", 1), ("INFO", 2), ("ERROR", 3), ("CRIT", 4)]
TYPE_BITS = {"u8": 8, "u16": 16, "u32": 32, "u64": 64}


class HeaderError(Exception):
    pass


@dataclass
class Define:
    name: str
    value: int
    comment: str
    where: str


@dataclass
class Field:
    name: str
    byte_offset: int  # from the start of the packet
    bits: int
    kind: str  # UINT or STRING
    description: str
    endian: str = "BIG_ENDIAN"
    states: list[tuple[str, int]] = field(default_factory=list)
    id_value: int | str | None = None  # an ID item / parameter: the value that identifies the packet
    default: int = 0  # commands
    minimum: int = 0
    maximum: int = 0


@dataclass
class Packet:
    app: str
    name: str
    mid: int
    description: str
    fields: list[Field]
    length: int  # bytes
    is_command: bool
    endian: str = "BIG_ENDIAN"


# ---- reading the headers -------------------------------------------------------------------------

_DEFINE = re.compile(r"^#define\s+(\w+)\s+(0x[0-9A-Fa-f]+|\d+)u?\b[ \t]*(?:/\*\s*(.*?)\s*\*/)?", re.M)


def read_defines(path: Path) -> dict[str, Define]:
    text = path.read_text()
    out = {}
    for m in _DEFINE.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        out[m.group(1)] = Define(m.group(1), int(m.group(2), 0), m.group(3) or "", f"{path.relative_to(REPO)}:{line}")
    return out


def read_structs(path: Path) -> dict[str, list[tuple[str, str, str]]]:
    """typedef name -> members as (type, name, array length or ""), comments dropped."""
    text = re.sub(r"/\*.*?\*/", "", path.read_text(), flags=re.S)
    structs = {}
    for m in re.finditer(r"typedef\s+struct\s*\w*\s*\{(.*?)\}\s*(\w+)\s*;", text, re.S):
        members = re.findall(r"(\w+)\s+(\w+)\s*(?:\[\s*(\w+)\s*\])?\s*;", m.group(1))
        structs[m.group(2)] = members
    return structs


def read_member_docs(path: Path) -> dict[str, str]:
    """Member name -> its /**< doc */ comment (payload fields)."""
    return {m.group(1): m.group(2).strip() for m in
            re.finditer(r"\b(\w+)\s*\[\s*\w+\s*\]\s*;\s*/\*\*<\s*(.*?)\s*\*/", path.read_text())}


def snake(camel: str) -> str:
    """ResetCounters -> RESET_COUNTERS, SendHk -> SEND_HK."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", camel).upper()


def lookup(defines: dict[str, Define], name: str, wanted_by: str) -> Define:
    if name not in defines:
        raise HeaderError(f"{wanted_by} needs #define {name}, which {WIRE_H.relative_to(REPO)} does not have")
    return defines[name]


# ---- building the packets --------------------------------------------------------------------------

def body_fields(defines: dict[str, Define], length_macro: str, base: int) -> list[Field]:
    """The fields of a wire-format body: every `<prefix>NAME offset /* uNN what */` define, checked to tile it."""
    prefix = BODY_FIELDS.get(length_macro)
    if prefix is None:
        raise HeaderError(f"no field list is known for a payload of {length_macro} bytes (BODY_FIELDS)")
    total = lookup(defines, length_macro, "a payload").value
    found = sorted((d for n, d in defines.items() if n.startswith(prefix) and not n.endswith(("_LEN", "_MID"))),
                   key=lambda d: d.value)
    fields = []
    for k, d in enumerate(found):
        m = re.match(r"(u8|u16|u32|u64)\b\s*(.*)", d.comment)
        if m is None:
            raise HeaderError(f"{d.where}: {d.name} has no u8/u16/u32/u64 type in its comment")
        bits = TYPE_BITS[m.group(1)]
        end = found[k + 1].value if k + 1 < len(found) else total
        if d.value + bits // 8 != end:
            raise HeaderError(f"{d.where}: {d.name} is {m.group(1)} at {d.value} but the next field starts at {end}")
        name = d.name[len(prefix):]
        fields.append(Field(name, base + d.value, bits, "UINT", m.group(2) or name.lower().replace("_", " ")))
    if not fields or fields[0].byte_offset != base:
        raise HeaderError(f"the {prefix}* offsets do not start at 0")
    return fields


def command_header(mid: int, cc: int, length: int) -> list[Field]:
    return [
        Field("CCSDS_STREAMID", 0, 16, "UINT", "Message ID (MsgId V1: the first header word)", id_value=mid,
              default=mid, minimum=mid, maximum=mid),
        Field("CCSDS_SEQUENCE", 2, 16, "UINT", "Sequence flags (3 = unsegmented) and count", default=0xC000,
              minimum=0, maximum=0xFFFF),
        Field("CCSDS_LENGTH", 4, 16, "UINT", "Packet length - 7", default=length - 7, minimum=length - 7,
              maximum=length - 7),
        Field("CCSDS_FC", 6, 8, "UINT", "Function code", id_value=cc, default=cc, minimum=cc, maximum=cc),
        Field("CCSDS_CHECKSUM", 7, 8, "UINT", "0xFF XOR every byte (cFS apps do not check it; the native node does)",
              minimum=0, maximum=0xFF),
    ]


def telemetry_header(mid: int) -> list[Field]:
    return [
        Field("CCSDS_STREAMID", 0, 16, "UINT", "Message ID (MsgId V1: the first header word)", id_value=mid),
        Field("CCSDS_SEQUENCE", 2, 16, "UINT", "Sequence flags (3 = unsegmented) and count"),
        Field("CCSDS_LENGTH", 4, 16, "UINT", "Packet length - 7"),
        Field("SECONDS", 6, 32, "UINT", "Time: seconds"),
        Field("SUBSECS", 10, 16, "UINT", "Time: upper 16 bits of the subseconds"),
        Field("HDR_SPARE", 12, 32, "UINT", "Spare, zero (keeps the payload 8-byte aligned)"),
    ]


def checksum(packet: bytes) -> int:
    c = 0xFF
    for b in packet:
        c ^= b
    return c


def encode_defaults(p: Packet) -> bytes:
    buf = bytearray(p.length)
    for f in p.fields:
        if f.kind == "UINT" and f.name != "CCSDS_CHECKSUM":
            buf[f.byte_offset:f.byte_offset + f.bits // 8] = f.default.to_bytes(f.bits // 8, "big")
    return bytes(buf)


def build_packets(defines: dict[str, Define]) -> list[Packet]:
    packets = []
    for app, (struct_h, defs_h, _) in APP_HEADERS.items():
        structs = read_structs(APPS / struct_h)
        payloads = read_structs(APPS / defs_h)
        docs = read_member_docs(APPS / defs_h)
        for typedef, members in structs.items():
            m = re.fullmatch(rf"{app}_(\w+?)(Cmd|Tlm)_t", typedef)
            if m is None:
                continue
            header, payload = members[0], members[1:]
            if payload and payload[0][0] not in payloads:
                raise HeaderError(f"{struct_h}: {typedef} carries {payload[0][0]}, not defined in {defs_h}")
            pay_members = payloads[payload[0][0]] if payload else []
            if m.group(2) == "Cmd":
                if header[0] != "CFE_MSG_CommandHeader_t":
                    raise HeaderError(f"{struct_h}: {typedef} does not start with a command header")
                packets.append(command_packet(defines, app, snake(m.group(1)), pay_members, docs))
            else:
                if header[0] != "CFE_MSG_TelemetryHeader_t" or len(pay_members) != 1:
                    raise HeaderError(f"{struct_h}: {typedef} is not a telemetry header + one byte-array body")
                packets.append(telemetry_packet(defines, app, snake(m.group(1)), pay_members[0][2]))
    return packets


def command_packet(defines, app: str, name: str, members, docs) -> Packet:
    hdr = lookup(defines, "SKYMEM_CMD_HDR_LEN", "a command").value
    if name == "SEND_HK":  # the cFS convention: its own MID, function code 0
        mid, cc = lookup(defines, f"{app}_SEND_HK_MID", name).value, 0
    else:
        mid, cc = lookup(defines, f"{app}_CMD_MID", name).value, lookup(defines, f"{app}_{name}_CC", name).value
    fields, offset = [], hdr
    for ctype, member, count in members:
        size = defines[count].value if count in defines else int(count) if count.isdigit() else None
        if ctype != "uint8" or size not in (1, 2, 4, 8):
            raise HeaderError(f"{app} {name}: member {member} is not a big-endian uint8[1|2|4|8] field")
        fname = snake(member)
        f = Field(fname, offset, size * 8, "UINT", docs.get(member, fname.lower()), maximum=(1 << (size * 8)) - 1)
        if fname == "SPARE":
            f.maximum = 0
        states = sorted((d for n, d in defines.items() if n.startswith(f"{app}_PARAM_")), key=lambda d: d.value)
        if fname == "PARAM_ID" and states:
            f.states = [(d.name[len(f"{app}_PARAM_"):], d.value) for d in states]
            f.minimum, f.maximum, f.default = states[0].value, states[-1].value, states[0].value
        fields.append(f)
        offset += size
    p = Packet(app, f"{app}_{name}", mid, f"{app} {name.replace('_', ' ').lower()} (MID {mid:#06x}, cc {cc})",
               command_header(mid, cc, offset) + fields, offset, is_command=True)
    next(f for f in p.fields if f.name == "CCSDS_CHECKSUM").default = checksum(encode_defaults(p))
    return p


def telemetry_packet(defines, app: str, name: str, length_macro: str) -> Packet:
    mid = lookup(defines, f"{app}_{name}_TLM_MID", name).value
    hdr = lookup(defines, "SKYMEM_TLM_HDR_LEN", "telemetry").value
    body = body_fields(defines, length_macro, hdr)
    return Packet(app, f"{app}_{name}", mid, f"{app} housekeeping (MID {mid:#06x})",
                  telemetry_header(mid) + body, hdr + defines[length_macro].value, is_command=False)


def event_packet(app: str, eventids_h: str) -> Packet:
    """The cFE long event message, identified as this app's by its application name."""
    events = read_defines(APPS / eventids_h)
    states = [(d.name[len(app) + 1:-len("_EID")], d.value) for d in sorted(events.values(), key=lambda d: d.value)
              if d.name.startswith(app + "_") and d.name.endswith("_EID")]
    if not states:
        raise HeaderError(f"{eventids_h}: no {app}_*_EID event IDs")
    fields, offset = telemetry_header(EVS_LONG_EVENT_MID), 16
    for fname, size, kind, what in EVS_LONG_EVENT_PAYLOAD:
        f = Field(fname, offset, size * 8, kind, what, endian="LITTLE_ENDIAN")
        if fname == "APP_NAME":
            f.id_value = app
        elif fname == "EVENT_ID":
            f.states, f.description = states, f"Event ID ({Path(eventids_h).name})"
        elif fname == "EVENT_TYPE":
            f.states = EVS_EVENT_TYPES
        fields.append(f)
        offset += size
    return Packet(app, f"{app}_EVENT", EVS_LONG_EVENT_MID,
                  f"{app} event message (cFE EVS long event packet from the app named {app})", fields, offset,
                  is_command=False, endian="LITTLE_ENDIAN")


# ---- writing ----------------------------------------------------------------------------------------

def banner(comment: str, what: str) -> str:
    lines = [f"Generated by {COMMAND} -- do not edit.", what,
             "Source: skymem_wire.h and the apps' msgstruct / msgdefs / eventids headers."]
    if comment == "#":
        return "".join(f"# {line}\n" for line in lines)
    return "/*\n" + "".join(f" * {line}\n" for line in lines) + " */\n"


def hexval(v: int, bits: int) -> str:
    return f"0x{v:0{bits // 4}X}"


def cosmos_command(p: Packet) -> str:
    out = [f'COMMAND {TARGET_NAME} {p.name} BIG_ENDIAN "{p.description}"']
    for f in p.fields:
        key = "ID_PARAMETER" if f.id_value is not None else "PARAMETER"
        values = (f.minimum, f.maximum, f.default)
        shown = " ".join(hexval(v, f.bits) if f.name.startswith("CCSDS_") else str(v) for v in values)
        out.append(f'  {key} {f.name} {f.byte_offset * 8} {f.bits} {f.kind} {shown} "{f.description}" {f.endian}')
        if f.name == "CCSDS_STREAMID":
            out.append('    FORMAT_STRING "0x%04X"')
        out += [f"    STATE {s} {v}" for s, v in f.states]
    return "\n".join(out) + "\n"


def cosmos_telemetry(p: Packet) -> str:
    out = [f'TELEMETRY {TARGET_NAME} {p.name} {p.endian} "{p.description}"']
    for f in p.fields:
        if f.id_value is None:
            out.append(f'  ITEM {f.name} {f.byte_offset * 8} {f.bits} {f.kind} "{f.description}" {f.endian}')
        else:
            ident = f'"{f.id_value}"' if f.kind == "STRING" else hexval(f.id_value, f.bits)
            out.append(f'  ID_ITEM {f.name} {f.byte_offset * 8} {f.bits} {f.kind} {ident} "{f.description}" '
                       f"{f.endian}")
        if f.name == "CCSDS_STREAMID":
            out.append('    FORMAT_STRING "0x%04X"')
        out += [f"    STATE {s} {v}" for s, v in f.states]
    return "\n".join(out) + "\n"


PLUGIN_TXT = """\
# OpenC3 COSMOS plugin for the SkyMemory cFS apps SKYMEM and ISL_ROUTER (docs/CFS.md).
# Install it once per cFS instance, each time with that instance's ports (the launcher's
# manifest lists them: command_port, tlm_host, tlm_port) and its own target name.
VARIABLE skymem_target_name SKYMEM
# CI_LAB of the instance: 1234 + cpuid - 1 on a stock mission
VARIABLE skymem_cmd_host 127.0.0.1
VARIABLE skymem_cmd_port 1236
# Where its TO_LAB sends: the address given in TO_LAB's enable-output command, port 1235 (TO_LAB_TLM_PORT)
VARIABLE skymem_tlm_host 127.0.1.1
VARIABLE skymem_tlm_port 1235

TARGET SKYMEM <%= skymem_target_name %>
# udp_interface.rb: write host, write port, read port, write source port, interface address, ttl,
# write timeout, read timeout, bind address (the instance's own telemetry address)
INTERFACE <%= skymem_target_name %>_INT udp_interface.rb &
    <%= skymem_cmd_host %> <%= skymem_cmd_port %> <%= skymem_tlm_port %> &
    nil nil 128 nil nil <%= skymem_tlm_host %>
  MAP_TARGET <%= skymem_target_name %>
"""

TARGET_TXT = """\
# Header fields COSMOS need not show in its command sender and packet viewer.
IGNORE_PARAMETER CCSDS_STREAMID
IGNORE_PARAMETER CCSDS_SEQUENCE
IGNORE_PARAMETER CCSDS_LENGTH
IGNORE_PARAMETER CCSDS_FC
IGNORE_PARAMETER CCSDS_CHECKSUM
IGNORE_ITEM CCSDS_STREAMID
IGNORE_ITEM CCSDS_SEQUENCE
IGNORE_ITEM CCSDS_LENGTH
IGNORE_ITEM HDR_SPARE
"""

GEMSPEC = """\
# Build the plugin gem with: gem build openc3-cosmos-skymem.gemspec
Gem::Specification.new do |s|
  s.name = 'openc3-cosmos-skymem'
  s.summary = 'SkyMemory cFS apps SKYMEM and ISL_ROUTER: commands, housekeeping, events'
  s.authors = ['SkyMemory']
  s.version = '1.0.0'
  s.files = Dir.glob('targets/**/*') + %w[plugin.txt]
end
"""


def lab_table_rows(defines: dict[str, Define]) -> tuple[str, str]:
    hk = [(a, lookup(defines, f"{a}_HK_TLM_MID", "TO_LAB").value) for a in APP_HEADERS]
    req = [(a, lookup(defines, f"{a}_SEND_HK_MID", "SCH_LAB").value) for a in APP_HEADERS]
    to_lab = (banner("/*", "TO_LAB subscriptions for the SkyMemory apps' housekeeping. A mission copies\n"
                     " * to_lab's fsw/tables/to_lab_sub.c into its <mission>_defs/tables/, puts this file beside it\n"
                     " * and adds `#include \"to_lab_skymem_subs.inc\"` in TO_LAB_Subs.Subs[] before the\n"
                     " * CFE_SB_MSGID_RESERVED entry (docs/CFS.md).")
              + "".join(f"{{CFE_SB_MSGID_WRAP_VALUE({hexval(mid, 16)}), {{0, 0}}, 4}}, /* {app}_HK_TLM_MID */\n"
                        for app, mid in hk))
    sch_lab = (banner("/*", "SCH_LAB entries that ask both SkyMemory apps for housekeeping once a second (at\n"
                      " * SCH_LAB's default 100 ticks per second). Include `sch_lab_skymem_hk.inc` in the\n"
                      " * Config[] list of a mission copy of sch_lab's fsw/tables/sch_lab_table.c (docs/CFS.md).")
               + "".join(f"{{CFE_SB_MSGID_WRAP_VALUE({hexval(mid, 16)}), 100, 0}}, /* {app}_SEND_HK_MID */\n"
                         for app, mid in req))
    return to_lab, sch_lab


def check_names(packets: list[Packet]) -> None:
    """COSMOS refuses two items of one name in a packet, and two packets of one name in a target."""
    names = [p.name for p in packets]
    for p in packets:
        fields = [f.name for f in p.fields]
        if len(set(fields)) != len(fields):
            raise HeaderError(f"{p.name}: a field name is used twice in {fields}")
    if len(set(names)) != len(names):
        raise HeaderError(f"a packet name is used twice in {names}")


def generate() -> dict[Path, str]:
    defines = read_defines(WIRE_H)
    packets = build_packets(defines)
    packets += [event_packet(app, eventids_h) for app, (_, _, eventids_h) in APP_HEADERS.items()]
    check_names(packets)
    files: dict[Path, str] = {}
    cmd_tlm = COSMOS_DIR / "targets" / TARGET / "cmd_tlm"
    for app in APP_HEADERS:
        mine = [p for p in packets if p.app == app]
        commands = [p for p in mine if p.is_command]
        telemetry = [p for p in mine if not p.is_command]
        if not commands or len(telemetry) < 2:
            raise HeaderError(f"{app}: found {len(commands)} commands and {len(telemetry) - 1} telemetry packets")
        low = app.lower()
        files[cmd_tlm / f"{low}_cmd_def.txt"] = (banner("#", f"{app} commands.") + "\n"
                                                 + "\n".join(cosmos_command(p) for p in commands))
        files[cmd_tlm / f"{low}_tlm_def.txt"] = (banner("#", f"{app} telemetry: housekeeping and events.") + "\n"
                                                 + "\n".join(cosmos_telemetry(p) for p in telemetry))
    files[COSMOS_DIR / "plugin.txt"] = banner("#", "COSMOS plugin definition.") + PLUGIN_TXT
    files[COSMOS_DIR / "targets" / TARGET / "target.txt"] = banner("#", "COSMOS target settings.") + TARGET_TXT
    files[COSMOS_DIR / "openc3-cosmos-skymem.gemspec"] = banner("#", "Gem specification of the plugin.") + GEMSPEC
    to_lab, sch_lab = lab_table_rows(defines)
    files[TABLES_DIR / "to_lab_skymem_subs.inc"] = to_lab
    files[TABLES_DIR / "sch_lab_skymem_hk.inc"] = sch_lab
    return files


def main() -> int:
    try:
        files = generate()
    except (HeaderError, OSError) as exc:
        print(f"generate_cosmos: {exc}", file=sys.stderr)
        return 1
    for path, text in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
            print(f"wrote {path.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
