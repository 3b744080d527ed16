"""Rotation-driven migration planning (paper §3.7, Figure 8): pure logic, no network.

The ground planner drives migration (docs/placement.md says why): it knows
every block it set from its own index, so for the step transition k -> k+1 it
can list, without asking anyone, which chunks sit on the LOS box's east column
(about to leave line of sight) and where they must go (the column entering the
box on the west, same plane, w = box width columns west).  Each operation maps
one-to-one onto a MIGRATE command (wire: chunk range first/count/stride +
target plane/sat), sent to the source satellite, which forwards the chunks over
ISL as SET_CHUNK and deletes its copies once the target has acknowledged them.

Only the migrating strategies (rotation, rotation-hop) produce operations.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Protocol

from skymemory.orbit import placement


SEAL_OVERHEAD = 32  # protocol.seal.OVERHEAD: a sealed chunk's key id, nonce and tag (orbit is below protocol)


class MigratableBlock(placement.PlacedBlock, Protocol):
    """A block record as kept by the ground index (skymemory.store.BlockRecord fits)."""

    block_hash: bytes
    n_bytes: int
    chunk_bytes: int
    parity: int  # coded stripes (skymemory.protocol.stripes): parity chunks per stripe; 0: none


@dataclass(frozen=True)
class MigrateOp:
    """One MIGRATE command: move chunks first, first+stride, ... (count of them)."""

    block_hash: bytes
    server: int  # 1-based server whose chunks move
    source: placement.Satellite  # (plane, sat) holding them during step k
    target: placement.Satellite  # (plane, sat) that holds them from step k+1
    first: int
    count: int
    stride: int
    n_bytes: int  # chunk data bytes moved (the last chunk of a block may be short)
    isl_hops: int  # hops from source to target along the plane (shorter way round)

    def chunk_ids(self) -> list[int]:
        return [self.first + i * self.stride for i in range(self.count)]


def check_block(block: MigratableBlock) -> None:
    """The sizes of a record must agree: every chunk full except possibly the last."""
    placement.check_strategy(block.strategy)
    placement.check_n_servers(block.n_servers)
    if block.chunk_bytes < 1:
        raise ValueError(f"chunk_bytes must be >= 1, got {block.chunk_bytes}")
    if block.chunk_count < 1:
        raise ValueError(f"chunk_count must be >= 1, got {block.chunk_count}")
    if block.parity:  # the wire's chunks, data and parity: the data's must hold the block (the data chunks of a
        # block of chunk_count on the wire, as protocol.stripes.Stripes.from_wire counts them; orbit is below it)
        full, rest = divmod(block.chunk_count, block.n_servers)
        data = full * (block.n_servers - block.parity) + max(0, rest - block.parity)
        if data < 1 or block.n_bytes > data * block.chunk_bytes:
            raise ValueError(f"block of {block.n_bytes} bytes cannot have {data} data chunks of {block.chunk_bytes} "
                             "bytes")
        return
    # in the clear a chunk carries chunk_bytes of the block, sealed SEAL_OVERHEAD fewer (a block of 43,000 bytes is
    # 7 chunks of 6,144, or 8 sealed ones): either count is a block's
    fits = any((block.chunk_count - 1) * per < block.n_bytes <= block.chunk_count * per
               for per in (block.chunk_bytes, block.chunk_bytes - SEAL_OVERHEAD))
    if not (fits or (block.n_bytes == 0 and block.chunk_count == 1)):
        raise ValueError(
            f"block of {block.n_bytes} bytes cannot have {block.chunk_count} chunks of {block.chunk_bytes} bytes"
        )


def chunk_bytes_of(block: MigratableBlock, chunk_id: int) -> int:
    """Data bytes of one chunk: chunk_bytes, except the last chunk holds the remainder (coded: chunk_bytes each,
    parity chunks are whole and the short last data chunk is counted whole)."""
    if not 0 <= chunk_id < block.chunk_count:
        raise ValueError(f"chunk id {chunk_id} outside 0..{block.chunk_count - 1}")
    if chunk_id < block.chunk_count - 1 or block.parity:
        return block.chunk_bytes
    rest = block.n_bytes - (block.chunk_count - 1) * block.chunk_bytes
    if rest > 0:
        return rest
    return block.n_bytes - (block.chunk_count - 1) * (block.chunk_bytes - SEAL_OVERHEAD) + SEAL_OVERHEAD  # sealed


def plan_block(block: MigratableBlock, step: int, rotation: placement.Rotation) -> list[MigrateOp]:
    """MIGRATE operations for one block at the global step transition `step` -> `step + 1`."""
    check_block(block)
    if block.strategy not in placement.MIGRATING_STRATEGIES:
        return []
    created_step = placement.rotation_step_index(block.created_ms, rotation.step_ms)
    if step < created_step:
        return []  # the block did not exist yet during `step`
    placement.check_fits(block.strategy, block.n_servers, rotation.planes, rotation.sats)
    elapsed = step - created_step
    _, east_edge = placement.box_columns(block.n_servers)
    width = placement.box_width(block.n_servers)
    centre = placement.check_satellite(tuple(block.centre), rotation.planes, rotation.sats)
    here = placement.overhead_after(centre, elapsed, rotation.planes, rotation.sats)
    if width == rotation.sats:
        return []  # the box spans the whole plane: nothing ever leaves line of sight
    hops = min(width, rotation.sats - width)
    ops: list[MigrateOp] = []
    for index, (east, south) in enumerate(placement.current_offsets(block.strategy, block.n_servers, elapsed)):
        if east != east_edge:
            continue
        server = index + 1
        first, count, stride = placement.server_chunks(server, block.n_servers, block.chunk_count)
        if count == 0:
            continue
        moved = sum(chunk_bytes_of(block, first + i * stride) for i in range(count))
        ops.append(
            MigrateOp(
                block_hash=block.block_hash,
                server=server,
                source=placement.satellite_at(here, (east, south), rotation.planes, rotation.sats),
                target=placement.satellite_at(here, (east - width, south), rotation.planes, rotation.sats),
                first=first,
                count=count,
                stride=stride,
                n_bytes=moved,
                isl_hops=hops,
            )
        )
    return ops


def plan_transition(blocks: Iterable[MigratableBlock], step: int, rotation: placement.Rotation) -> list[MigrateOp]:
    """All MIGRATE operations for the step transition `step` -> `step + 1`, ordered by source satellite.

    The operations are independent (different blocks or different chunks), so
    the executor may issue them in parallel; a chunk briefly held by both
    satellites is harmless (paper §3.7).
    """
    ops = [op for block in blocks for op in plan_block(block, step, rotation)]
    ops.sort(key=lambda op: (op.source, op.block_hash, op.server))
    return ops


def total_bytes(ops: Iterable[MigrateOp]) -> int:
    return sum(op.n_bytes for op in ops)
