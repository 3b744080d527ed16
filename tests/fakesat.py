"""A tiny Python satellite for client unit tests: real UDP socket, scripted faults.

It stores chunks like the node does and answers the data-plane commands, but it
can be told to drop, duplicate or corrupt replies so the client's retry,
duplicate-suppression and CRC paths are exercised deterministically. The real
node is tested in tests/integration/.
"""

from __future__ import annotations

import select
import socket
import threading
import time

from skymemory.protocol import wire


class FakeSatellite:
    def __init__(self, plane: int = 0, sat: int = 0) -> None:
        self.me = (plane, sat)
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.address = self.sock.getsockname()
        self.store: dict[tuple[bytes, int], tuple[wire.ChunkDesc, bytes]] = {}
        self.received: list[bytes] = []
        self.received_at: list[float] = []  # time.monotonic() of each request's arrival
        # faults, consumed in order
        self.drop_requests = 0  # ignore the next N requests
        self.duplicate_replies = False  # send every reply twice
        self.corrupt_replies = 0  # flip a data byte in the next N DATA replies
        self.busy_replies = 0  # answer NAK BUSY to the next N requests
        self.reply_gap_s = 0.0  # pause before each reply (a slow satellite that still answers)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> "FakeSatellite":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.sock.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            ready, _, _ = select.select([self.sock], [], [], 0.05)
            if not ready:
                continue
            data, addr = self.sock.recvfrom(65535)
            self.received.append(data)
            self.received_at.append(time.monotonic())
            if self.drop_requests:
                self.drop_requests -= 1
                continue
            for reply in self._answer(wire.decode_command(data)):
                if self.reply_gap_s:  # a slow satellite: every reply after a pause
                    self._stop.wait(self.reply_gap_s)
                self.sock.sendto(reply, addr)
                if self.duplicate_replies:
                    self.sock.sendto(reply, addr)

    def _reply(self, cmd, kind, status=0, chunk_id=0, value=0, body=b""):
        r = cmd.route  # it answers for any destination, as that satellite would (the ground checks the source)
        route = wire.RouteHeader(r.src_plane, r.src_sat, r.dst_plane, r.dst_sat, r.via_plane, r.via_sat, r.request_id)
        return wire.encode_reply(route, kind, cmd.cc, status, chunk_id, value, body)

    def _data(self, cmd, cid):
        item = self.store.get((cmd.block_hash, cid))
        if item is None:
            return self._reply(cmd, wire.SKYMEM_REPLY_NAK, wire.SKYMEM_NAK_NOT_FOUND, cid, body=cmd.block_hash)
        desc, data = item
        if self.corrupt_replies:
            self.corrupt_replies -= 1
            data = bytes([data[0] ^ 0xFF]) + data[1:]
        return self._reply(cmd, wire.SKYMEM_REPLY_DATA, chunk_id=cid, body=desc.pack() + data)

    def _answer(self, cmd: wire.Command) -> list[bytes]:
        if self.busy_replies:
            self.busy_replies -= 1
            return [self._reply(cmd, wire.SKYMEM_REPLY_NAK, wire.SKYMEM_NAK_BUSY)]
        if cmd.cc == wire.SKYMEM_NOOP_CC:
            return [self._reply(cmd, wire.SKYMEM_REPLY_ACK)]
        if cmd.cc == wire.SKYMEM_SET_CHUNK_CC:
            self.store[(cmd.block_hash, cmd.chunk_id)] = (cmd.desc, cmd.data)
            return [self._reply(cmd, wire.SKYMEM_REPLY_ACK, chunk_id=cmd.chunk_id, body=cmd.block_hash)]
        if cmd.cc == wire.SKYMEM_GET_CHUNK_CC:
            return [self._data(cmd, cmd.chunk_id)]
        if cmd.cc == wire.SKYMEM_GET_CHUNKS_CC:
            return [self._data(cmd, cmd.first + k * cmd.stride) for k in range(cmd.count)]
        if cmd.cc == wire.SKYMEM_PROBE_CC:
            item = self.store.get((cmd.block_hash, cmd.chunk_id))
            if item is None:
                return [self._reply(cmd, wire.SKYMEM_REPLY_NAK, wire.SKYMEM_NAK_NOT_FOUND, cmd.chunk_id,
                                    body=cmd.block_hash)]
            return [self._reply(cmd, wire.SKYMEM_REPLY_ACK, chunk_id=cmd.chunk_id, value=item[0].chunk_count,
                                body=cmd.block_hash)]
        if cmd.cc == wire.SKYMEM_EVICT_BLOCK_CC:
            keys = [k for k in self.store if k[0] == cmd.block_hash]
            for k in keys:
                del self.store[k]
            return [self._reply(cmd, wire.SKYMEM_REPLY_ACK, value=len(keys), body=cmd.block_hash)]
        if cmd.cc == wire.SKYMEM_STATS_CC:
            stats = wire.Stats(*self.me, len(self.received), 0, len(self.store), *([0] * 15))
            return [self._reply(cmd, wire.SKYMEM_REPLY_STATS, body=stats.pack())]
        return [self._reply(cmd, wire.SKYMEM_REPLY_NAK, wire.SKYMEM_NAK_BAD_COMMAND)]
