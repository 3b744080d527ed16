"""cffi build script (API mode) for `skymemory._native`: the flight codec, CRC32C and geometry.

setup.py names this file in `cffi_modules`, so `pip install .` / `pip install -e .`
compile the core C sources (cfs_apps/skymem_core/fsw/src) into the Python
package: the ground then encodes and checks packets with the very code the
satellites run. `SKYMEM_CORE_DIR` may point at another skymem_core tree for a
manual build (`python _cffi_build.py`); setuptools builds need it inside the repo.

The ground's fast path (csrc/) seals chunks with OpenSSL's libcrypto (skymem_seal.c) and codes
stripes with Intel ISA-L's Reed-Solomon (skymem_stripe.c): the build links both (`libraries`), and
needs their headers (apt-get install libssl-dev libisal-dev; `make` installs them when missing).

Python's copies of the C declarations are checked by the C compiler, at every build:
the cdef below and the constants of `protocol/wire.py` (and the few of auth.py, mac.py,
seal.py, link/fastpath.py in `MIRRORS`) stay written out in Python, where a reader finds them, and
`header_checks()` turns them into C that the compiler compares with the headers:

- each constant becomes `_Static_assert(SKYMEM_X == <python value>, ...)`;
- each cdef function prototype is declared again after the headers (C refuses two
  different prototypes of one function: "conflicting types for ...");
- each cdef struct field's type is compared with the header's (gcc's and clang's
  __builtin_types_compatible_p), and a struct declared whole (no `...;`) has its size
  and every offset compared with the layout cffi gives it.

So a header change Python does not follow stops `make native` / `pip install` with
the constant, function or field named. We check rather than generate because the
headers size arrays with macros and are written for C readers (cffi's cdef cannot
read them as they are), while a generated wire.py would hide its constants from
the people who read and grep it. `python _cffi_build.py --check` compiles only the
checks (no extension is written); tests/test_header_checks.py runs it on an edited
copy of the headers.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

from cffi import FFI

REPO = Path(__file__).resolve().parents[2]
CORE = Path(os.environ.get("SKYMEM_CORE_DIR", REPO / "cfs_apps" / "skymem_core"))
# skymem_auth + skymem_sha256 + skymem_polyval + skymem_aes: the fast path signs SET_CHUNK like the satellites verify it
SOURCES = ["skymem_codec.c", "skymem_crc32c.c", "skymem_geometry.c", "skymem_auth.c", "skymem_sha256.c",
           "skymem_polyval.c", "skymem_aes.c"]
# the ground's batched transfer (POSIX sockets: not part of the portable flight core) and its sealed content
# (AES-128-GCM with OpenSSL's libcrypto: the satellites never hold a content key)
CSRC = Path(__file__).resolve().parent / "csrc"
# and its coded stripes (Reed-Solomon with Intel ISA-L)
GROUND_SOURCES = ["skymem_bulk.c", "skymem_bulk_batches.c", "skymem_bulk_get.c", "skymem_bulk_pace.c",
                  "skymem_bulk_replies.c", "skymem_bulk_sealing.c", "skymem_bulk_set.c", "skymem_bulk_stripes.c",
                  "skymem_seal.c", "skymem_stripe.c"]


def core_sources() -> list[Path]:
    return [CORE / "fsw" / "src" / name for name in SOURCES] + [CSRC / name for name in GROUND_SOURCES]


def sources_present() -> bool:
    return all(p.is_file() for p in core_sources()) and all(
        (CORE / "fsw" / "inc" / h).is_file() for h in ("skymem_codec.h", "skymem_crc32c.h", "skymem_geometry.h",
                                                 "skymem_auth.h", "skymem_sha256.h", "skymem_polyval.h",
                                                 "skymem_aes.h")) \
        and all((CSRC / h).is_file() for h in ("skymem_bulk.h", "skymem_seal.h", "skymem_stripe.h"))


CDEF = """
typedef struct { uint16_t dst_plane, dst_sat; uint16_t src_plane, src_sat; uint16_t via_plane, via_sat;
                 uint32_t request_id; uint8_t ttl, hops, flags, reserved; } skymem_route_t;
typedef struct { uint8_t block_hash[32]; uint32_t chunk_id; uint32_t chunk_count; uint64_t created_ms;
                 uint32_t crc32c; uint16_t data_len; uint8_t gossip_radius; uint8_t flags; } skymem_chunk_desc_t;
typedef struct { uint16_t ground; uint16_t via_plane, via_sat; } skymem_origin_t;
typedef struct { uint16_t plane, sat; uint32_t cmd_count, err_count, chunks; uint64_t bytes_used, bytes_budget;
                 uint32_t lru_evictions, blocks_purged; uint32_t rx_packets, tx_packets, forwarded, dropped,
                 invalid, auth_failures; uint32_t migrated_out, migrated_in; uint64_t mission_time_ms;
                 uint32_t uptime_s; ...; } skymem_stats_t;
typedef struct { uint16_t mid; uint8_t version; uint8_t is_cmd; uint8_t has_sec_hdr; uint16_t apid;
                 uint8_t seq_flags; uint16_t seq_count; size_t total_len; } skymem_pri_hdr_t;
typedef struct {
    skymem_pri_hdr_t pri; uint16_t mid; uint8_t is_cmd; uint8_t cc; uint32_t tlm_seconds; uint16_t tlm_subsecs;
    uint8_t has_route; skymem_route_t route; const uint8_t *payload; size_t payload_len; const uint8_t *auth;
    uint8_t block_hash[32]; uint8_t has_block_hash; uint32_t chunk_id; uint32_t first, count, stride;
    uint32_t evict_id; uint8_t radius; uint16_t target_plane, target_sat; uint16_t param_id;
    uint32_t param_value; skymem_chunk_desc_t desc; const uint8_t *data; uint8_t has_origin; skymem_origin_t origin;
    uint8_t reply_kind, reply_cc, reply_status; uint32_t reply_chunk_id, reply_value; skymem_stats_t stats;
    ...;
} skymem_msg_t;

const char *skymem_strerror(int err);
double skymem_orbital_period_s(double altitude_m);
double skymem_intra_plane_distance_m(double altitude_m, unsigned sats_per_plane);
double skymem_inter_plane_distance_max_m(double altitude_m, unsigned planes);
double skymem_inter_plane_distance_m(double altitude_m, unsigned planes, unsigned sats_per_plane,
                                     double inclination_rad, double t_s, int walker_phase);
double skymem_grid_distance_m(double d_m, double d_n, int along_plane_hops, int across_plane_hops);
double skymem_slant_range_m(double ground_distance_m, double altitude_m);
double skymem_light_time_s(double distance_m);
uint32_t skymem_crc32c(const uint8_t *data, size_t len);
uint32_t skymem_crc32c_update(uint32_t crc, const uint8_t *data, size_t len);
uint32_t skymem_crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b);
uint32_t skymem_crc32c_fold(const uint32_t *chunk_crcs, uint32_t count, uint32_t chunk_bytes, uint64_t total_len);
uint8_t skymem_cmd_checksum(const uint8_t *pkt, size_t len);
int skymem_parse(const uint8_t *buf, size_t len, skymem_msg_t *out);
int skymem_build_cmd(uint8_t *buf, size_t cap, uint16_t mid, uint8_t cc, uint16_t seq,
                     const uint8_t *payload, size_t payload_len);
int skymem_build_data_cmd(uint8_t *buf, size_t cap, uint8_t cc, uint16_t seq, const skymem_route_t *route,
                          const uint8_t *body, size_t body_len);
int skymem_build_set_param(uint8_t *buf, size_t cap, uint16_t seq, const skymem_route_t *route,
                           uint16_t param_id, uint32_t value);
int skymem_build_set_chunk(uint8_t *buf, size_t cap, uint16_t seq, const skymem_route_t *route,
                           const skymem_chunk_desc_t *desc, const uint8_t *data);
int skymem_build_set_chunk_origin(uint8_t *buf, size_t cap, uint16_t seq, const skymem_route_t *route,
                                  const skymem_chunk_desc_t *desc, const skymem_origin_t *origin,
                                  const uint8_t *data);
int skymem_build_get_chunk(uint8_t *buf, size_t cap, uint16_t seq, const skymem_route_t *route,
                           const uint8_t *hash, uint32_t chunk_id);
int skymem_build_probe(uint8_t *buf, size_t cap, uint16_t seq, const skymem_route_t *route,
                       const uint8_t *hash, uint32_t chunk_id);
int skymem_build_get_chunks(uint8_t *buf, size_t cap, uint16_t seq, const skymem_route_t *route,
                            const uint8_t *hash, uint32_t first, uint32_t count, uint32_t stride);
int skymem_build_evict(uint8_t *buf, size_t cap, uint16_t seq, const skymem_route_t *route,
                       const uint8_t *hash, uint32_t evict_id, uint8_t radius);
int skymem_build_migrate(uint8_t *buf, size_t cap, uint16_t seq, const skymem_route_t *route,
                         const uint8_t *hash, uint32_t first, uint32_t count, uint32_t stride,
                         uint16_t target_plane, uint16_t target_sat);
int skymem_build_tlm(uint8_t *buf, size_t cap, uint16_t mid, uint16_t seq, uint32_t seconds, uint16_t subsecs,
                     const uint8_t *payload, size_t payload_len);
int skymem_build_reply(uint8_t *buf, size_t cap, uint16_t seq, uint32_t seconds, uint16_t subsecs,
                       const skymem_route_t *route, uint8_t kind, uint8_t cc, uint8_t status, uint32_t chunk_id,
                       uint32_t value, const uint8_t *body, size_t body_len);
int skymem_build_reply_data(uint8_t *buf, size_t cap, uint16_t seq, uint32_t seconds, uint16_t subsecs,
                            const skymem_route_t *route, uint8_t cc, const skymem_chunk_desc_t *desc,
                            const uint8_t *data);
int skymem_build_reply_stats(uint8_t *buf, size_t cap, uint16_t seq, uint32_t seconds, uint16_t subsecs,
                             const skymem_route_t *route, const skymem_stats_t *stats);
typedef struct { ...; } skymem_mac_key_t;
void skymem_mac_key_init(skymem_mac_key_t *k, const uint8_t *key, size_t key_len);
void skymem_auth_mac(const skymem_mac_key_t *k, const uint8_t *pkt, size_t len_before_tag, uint8_t out[32]);
int skymem_auth_sign_with(const skymem_mac_key_t *k, uint32_t key_id, uint64_t seq, uint8_t *pkt, size_t len,
                          size_t cap);
int skymem_auth_check_reply(const skymem_mac_key_t *k, uint32_t key_id, const uint8_t *pkt, size_t len);
const char *skymem_polyval_impl(void);
int skymem_polyval_use_accel(int level);
const char *skymem_aes_impl(void);
int skymem_aes_use_accel(int on);
typedef struct skymem_reply_window skymem_reply_window_t;
skymem_reply_window_t *skymem_reply_window_new(uint32_t key_id, uint64_t start_us);
uint64_t skymem_reply_window_floor(uint64_t start_us);
void skymem_reply_window_free(skymem_reply_window_t *w);
int skymem_reply_window_check(skymem_reply_window_t *w, const skymem_mac_key_t *k, const uint8_t *pkt, size_t len,
                              size_t crc_off,
                              size_t crc_len, uint32_t *crc);
uint64_t skymem_reply_window_top(skymem_reply_window_t *w, uint16_t plane, uint16_t sat);
typedef struct { uint16_t plane, sat; uint16_t via_plane, via_sat; uint32_t ipv4; uint16_t port;
                 const skymem_mac_key_t *up_key, *down_key; uint64_t reply_floor; }
    skymem_bulk_server_t;
typedef struct { uint32_t id; uint8_t key[16]; } skymem_seal_key_t;
typedef struct { uint32_t n_keys; skymem_seal_key_t keys[16]; } skymem_seal_keys_t;
typedef struct skymem_seal_ctx skymem_seal_ctx_t;
skymem_seal_ctx_t *skymem_seal_ctx_new(const skymem_seal_keys_t *keys);
int skymem_stripe_encode(int k, int m, size_t len, const uint8_t *const *data, uint8_t *const *parity);
int skymem_stripe_decode(int k, int m, size_t len, uint8_t *const *chunks, const uint8_t *present);
typedef struct { uint32_t k, m, n, data, stripes; } skymem_stripe_layout_t;
int skymem_stripe_layout(uint32_t k, uint32_t m, uint32_t data, skymem_stripe_layout_t *out);
uint32_t skymem_stripe_wire_id(const skymem_stripe_layout_t *l, uint32_t d);
void skymem_stripe_data_indexes(const skymem_stripe_layout_t *l, uint32_t *out);
uint32_t skymem_stripe_data_index(const skymem_stripe_layout_t *l, uint32_t cid);
void skymem_seal_ctx_free(skymem_seal_ctx_t *c);
int skymem_seal_keys_check(const skymem_seal_keys_t *keys);
uint32_t skymem_seal_chunk_count(uint64_t n_bytes, uint32_t chunk_bytes);
typedef struct { uint32_t chunk_bytes, stripe_k, stripe_m; } skymem_seal_layout_t;
int skymem_seal_chunk(skymem_seal_ctx_t *c, const uint8_t *hash, uint32_t chunk_id, uint32_t chunk_count,
                      uint64_t n_bytes, const skymem_seal_layout_t *layout, const uint8_t *plain, size_t plain_len,
                      uint8_t *out);
int skymem_open_chunk(skymem_seal_ctx_t *c, const uint8_t *hash, uint32_t chunk_id, uint32_t chunk_count,
                      uint64_t n_bytes, const skymem_seal_layout_t *layout, const uint8_t *sealed, size_t sealed_len,
                      uint8_t *out);
typedef struct { const uint8_t *hash; uint8_t *buf; uint64_t n_bytes; uint32_t chunk_bytes; uint32_t chunk_count;
                 uint32_t server0; uint32_t n_servers; uint64_t created_ms; uint8_t *status; uint32_t *prefix;
                 uint32_t *chunk_crcs; uint32_t stripe_k, stripe_m; }
    skymem_bulk_block_t;
typedef struct { int fd; uint16_t station_id; uint32_t request_id; uint32_t window_bytes; uint32_t wave_chunks;
                 int wave_doubling; double rto_s; double deadline_s; uint32_t max_retries; double pace_Bps;
                 uint64_t packets_rx, packets_tx, bytes_rx; uint64_t crc_failures, retransmits, ignored;
                 int keyed; uint32_t auth_key_id;
                 uint64_t auth_seq_first, auth_seq_count; uint64_t auth_seq_used; uint64_t auth_failures;
                 uint8_t nak_status;
                 double first_reply_s;
                 skymem_reply_window_t *replies; uint64_t replayed; uint64_t wrong_source;
                 const skymem_seal_keys_t *seal; uint64_t seal_failures;
                 double hedge_s; uint64_t rebuilt; uint64_t parity_asked;
                 const uint32_t *progress_want; int progress_fd; }
    skymem_bulk_opts_t;
const char *skymem_sha256_impl(void);
int skymem_sha256_use_accel(int on);
void skymem_hmac_sha256(const uint8_t *key, size_t key_len, const uint8_t *data, size_t len, uint8_t out[32]);
void skymem_bulk_want(uint32_t *want, uint32_t chunks);
uint32_t skymem_bulk_get_requests(const skymem_bulk_block_t *blocks, uint32_t n_blocks, uint32_t wave_chunks,
                                   int wave_doubling);
int skymem_bulk_get(const skymem_bulk_server_t *servers, uint32_t n_servers_total,
                    skymem_bulk_block_t *blocks, uint32_t n_blocks, skymem_bulk_opts_t *opts);
int skymem_bulk_set(const skymem_bulk_server_t *servers, uint32_t n_servers_total,
                    skymem_bulk_block_t *blocks, uint32_t n_blocks, skymem_bulk_opts_t *opts);
uint32_t skymem_bulk_crc32c(const uint8_t *data, size_t len);
int skymem_build_hk(uint8_t *buf, size_t cap, uint16_t seq, uint32_t seconds, uint16_t subsecs,
                    const skymem_stats_t *stats);
"""

# ---- the checks: Python's copy of the headers, compiled against them ----------------------------------

PACKAGE = Path(__file__).resolve().parent
# Python modules whose integer constants mirror a header's #defines: module -> {python name: C macro};
# None: every module-level SKYMEM_* / ISL_ROUTER_* integer, under its macro's own name
MIRRORS: dict[str, dict[str, str] | None] = {
    "protocol/wire.py": None,
    "protocol/auth.py": {"SEQ_US": "SKYMEM_AUTH_SEQ_US", "TRAILER_LEN": "SKYMEM_AUTH_TRAILER_LEN",
                         "REPLAY_WINDOW": "SKYMEM_AUTH_WINDOW", "AUTH_E_REPLAY": "SKYMEM_AUTH_E_REPLAY",
                         "TAG_LEN": "SKYMEM_AUTH_TAG_LEN", "LINK_BIT": "SKYMEM_AUTH_LINK_BIT",
                         "KEY_MIN": "SKYMEM_AUTH_KEY_MIN", "KEY_MAX": "SKYMEM_AUTH_KEY_MAX",
                         "REPLY_SKEW_US": "SKYMEM_SAT_SEQ_AHEAD_US"},
    "protocol/mac.py": {"TAG_LEN": "SKYMEM_AUTH_TAG_LEN"},
    # seal.py's OVERHEAD is their sum (not a literal: skymem_seal.c asserts the same sum)
    "protocol/seal.py": {"KEY_ID_LEN": "SKYMEM_SEAL_KEY_ID_LEN", "NONCE_LEN": "SKYMEM_SEAL_NONCE_LEN",
                         "TAG_LEN": "SKYMEM_SEAL_TAG_LEN", "KEY_LEN": "SKYMEM_SEAL_KEY_LEN"},
    "link/fastpath.py": {"PENDING": "SKYMEM_BULK_PENDING", "OK": "SKYMEM_BULK_OK",
                         "NOT_FOUND": "SKYMEM_BULK_NOT_FOUND", "SEAL_FAILED": "SKYMEM_BULK_SEAL_FAILED",
                         "UNNEEDED": "SKYMEM_BULK_UNNEEDED", "HELD": "SKYMEM_BULK_HELD",
                         "REBUILT": "SKYMEM_BULK_REBUILT",
                         "DONE": "SKYMEM_BULK_DONE", "INCOMPLETE": "SKYMEM_BULK_INCOMPLETE",
                         "REFUSED": "SKYMEM_BULK_REFUSED", "E_CRYPTO": "SKYMEM_BULK_E_CRYPTO",
                         "SEAL_MAX_KEYS": "SKYMEM_SEAL_MAX_KEYS", "SEAL_OVERHEAD": "SKYMEM_SEAL_OVERHEAD"},
    "protocol/stripes.py": {"MAX_STRIPE_CHUNKS": "SKYMEM_STRIPE_MAX_CHUNKS"},
}


def python_constants(module: str, names: dict[str, str] | None) -> dict[str, int]:
    """{C macro: value} of a module's integer constants, read with ast (the package is not importable
    while it is being built: its dependencies may not be installed yet)."""
    found: dict[str, int] = {}
    for node in ast.parse((PACKAGE / module).read_text()).body:
        if not isinstance(node, ast.Assign) or len(node.targets) != 1:
            continue
        target, value = node.targets[0], node.value
        pairs = (zip(target.elts, value.elts) if isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple)
                 else [(target, value)])
        for t, v in pairs:
            sign = 1
            if isinstance(v, ast.UnaryOp) and isinstance(v.op, ast.USub):  # an error code: -5
                sign, v = -1, v.operand
            if not (isinstance(t, ast.Name) and isinstance(v, ast.Constant) and type(v.value) is int):
                continue
            macro = (t.id if t.id.startswith(("SKYMEM_", "ISL_ROUTER_")) else None) if names is None \
                else names.get(t.id)
            if macro:
                found[macro] = sign * v.value
    missing = [name for name, macro in (names or {}).items() if macro not in found]
    if missing:  # a mirror renamed in Python: say so rather than check less
        raise SystemExit(f"error: _cffi_build.MIRRORS names {missing} in {module}, which has no such constant")
    return found


def _cdef_statements() -> list[str]:
    """CDEF's top-level declarations (split at semicolons outside braces), whitespace collapsed."""
    out, depth, start = [], 0, 0
    for i, ch in enumerate(CDEF):
        depth += {"{": 1, "}": -1}.get(ch, 0)
        if ch == ";" and depth == 0:
            out.append(" ".join(CDEF[start:i].split()))
            start = i + 1
    return [s for s in out if s]


def _cdef_structs() -> tuple[FFI, dict[str, bool]]:
    """An FFI that lays out every cdef struct, and {typedef name: declared whole (no `...;`)}. The FFI is
    given CDEF without its `...;` (an opaque `{ ...; }` gets one char), so it can list a partial struct's
    declared fields; their offsets there mean nothing (cffi takes a partial struct's layout from the
    compiler), a whole struct's are the ones cffi uses."""
    listed = FFI()
    listed.cdef(re.sub(r"\{\s*\.\.\.;\s*\}", "{ char opaque; }", CDEF).replace("...;", ""))
    structs = {}
    for stmt in _cdef_statements():
        m = re.fullmatch(r"typedef struct \{(.*)\} (\w+)", stmt)
        if m and m.group(1).strip() != "...;":
            structs[m.group(2)] = "...;" not in m.group(1)
    return listed, structs


def header_checks() -> str:
    """C that compiles only where the headers agree with Python's copy (see the module docstring)."""
    lines = ["/* generated by _cffi_build.header_checks: Python's copy of the headers, checked by the compiler */",
             "#include <stddef.h>",
             # glibc turns _Static_assert into a bit-field trick under -std=c99, whose error does not quote
             # the message; gcc and clang know the keyword itself in every mode
             "#undef _Static_assert"]
    for module, names in MIRRORS.items():
        for macro, value in python_constants(module, names).items():
            lines.append(f'_Static_assert({macro} == {value}, "{macro}: skymemory/{module} says {value}, '
                         f'the C header differs");')
    for stmt in _cdef_statements():
        if not stmt.startswith("typedef"):
            lines.append(stmt + ";")  # a prototype differing from the header's: "conflicting types for ..."
    ffi, structs = _cdef_structs()
    for name, whole in structs.items():
        ctype = ffi.typeof(name)
        if whole:
            size = ffi.sizeof(ctype)
            lines.append(f'_Static_assert(sizeof({name}) == {size}, "{name}: the cdef makes it {size} bytes, '
                         f'the header differs");')
        for field, f in ctype.fields:
            decl = f.type.cname  # cffi spells the type as C does ("uint8_t[32]"), without a pointee's const
            member = f"__typeof__((({name} *)0)->{field})"
            same = f"__builtin_types_compatible_p({member}, {decl})"
            if decl.endswith(" *"):  # so a pointer field may point to const or not, as it may for cffi
                same += f" || __builtin_types_compatible_p({member}, {decl[:-2]} const *)"
            lines.append(f'_Static_assert({same}, "{name}.{field}: the cdef says {decl}, the header differs");')
            if whole:
                lines.append(f'_Static_assert(offsetof({name}, {field}) == {f.offset}, "{name}.{field}: the cdef '
                             f'puts it at offset {f.offset}, the header elsewhere");')
    return "\n".join(lines) + "\n"


HEADERS = ("skymem_codec.h", "skymem_crc32c.h", "skymem_geometry.h", "skymem_bulk.h", "skymem_seal.h",
           "skymem_stripe.h", "skymem_sha256.h", "skymem_auth.h", "skymem_polyval.h", "skymem_aes.h",
           "skymem_sat.h")  # SKYMEM_SAT_SEQ_AHEAD_US (auth.REPLY_SKEW_US)
INCLUDE_DIRS = [str(CORE / "fsw" / "inc"), str(CORE / "fsw" / "src"), str(CSRC)]

ffibuilder = FFI()
ffibuilder.cdef(CDEF)
ffibuilder.set_source(
    "skymemory._native",
    "".join(f'#include "{h}"\n' for h in HEADERS) + header_checks(),
    # setuptools refuses absolute source paths: give them relative to where the build runs
    sources=[os.path.relpath(p) for p in core_sources()],
    include_dirs=INCLUDE_DIRS,
    extra_compile_args=["-O2", "-std=c99"],
    libraries=["m", "crypto", "isal"],  # the geometry uses libm; sealed content libcrypto; coded stripes ISA-L
)


def check() -> int:
    """Compile the extension's own source (headers + checks + cffi's glue) without building it: the
    exit status and the compiler's errors are those a build would give."""
    cc = (sysconfig.get_config_var("CC") or "cc").split()
    with tempfile.TemporaryDirectory() as tmp:
        c_file = Path(tmp) / "_native.c"
        ffibuilder.emit_c_code(str(c_file))
        cmd = [*cc, "-std=c99", "-fsyntax-only", f"-I{sysconfig.get_paths()['include']}",
               *(f"-I{d}" for d in INCLUDE_DIRS), str(c_file)]
        return subprocess.run(cmd).returncode


if __name__ == "__main__":  # python _cffi_build.py [--check]: build into the current directory, or only check
    if sys.argv[1:] == ["--check"]:
        sys.exit(check())
    ffibuilder.compile(verbose=True)
