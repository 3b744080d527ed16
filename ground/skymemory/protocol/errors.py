"""Exceptions raised by the ground library (client, wire codec, block store)."""

from __future__ import annotations


class SkyMemoryError(Exception):
    """Base class of every SkyMemory ground-library error."""


class WireError(SkyMemoryError, ValueError):
    """A packet could not be encoded or decoded (bad length, bad field...)."""


class BadReply(SkyMemoryError):
    """A reply arrived that does not fit the request (wrong kind, malformed body)."""


class RequestTimeout(SkyMemoryError, TimeoutError):
    """No valid reply after every retry."""


class ChunkNotFound(SkyMemoryError, KeyError):
    """The satellite answered NAK NOT_FOUND for the chunk."""

    def __str__(self) -> str:  # KeyError quotes its argument; keep the plain message
        return str(self.args[0]) if self.args else "chunk not found"


class NakError(SkyMemoryError):
    """The satellite refused the request; `reason` is the SKYMEM_NAK_* code, `reason_name` its name
    (protocol.wire.nak_name: the raiser knows the wire, this module does not)."""

    def __init__(self, reason: int, reason_name: str, message: str = "") -> None:
        self.reason = reason
        self.reason_name = reason_name
        super().__init__(message or f"NAK {reason_name} ({reason})")
