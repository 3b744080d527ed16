"""The newest version of each named object this ground has written or read: what a get must not go back behind.

A sealed object's metadata is the ground's own (only the ground holds the content key), but an older genuine
copy is the ground's own too. Someone holding one satellite's key file and a capture of the link can plant
a copy of an earlier version's sealed metadata and data where the newest is no longer held (a home that
restarted, or the captured satellite itself), and every chunk of it opens. What tells it apart is time:
every version's metadata carries when it was made (`created_ms`, mission time, sealed), a repair's rewrite
when it was made (`repaired_ms`), a delete is a sealed tombstone with its own `created_ms`. This ledger
keeps, per object key, the newest of those this ground host has seen, and `ObjectStore` refuses a copy
older than it ("stale") and a name whose newest event is its deletion ("deleted").

The ledger is a file beside the ground's content key file (`object-versions`, mode 0600): every process
of this ground host, and every ground host that shares that directory, sees what the others wrote or
read. Lines are appended under an exclusive lock and read under a shared one:

    skymem-object-versions 1
    KEY_HEX CREATED_MS REPAIRED_MS VERSION_HEX|deleted

A ground host that shares neither the ledger nor saw the newer version can still be handed an older one;
docs/RELIABILITY.md ("Freshness") says what is promised and what is not.
"""

from __future__ import annotations

import fcntl
import os
from dataclasses import dataclass
from pathlib import Path

HEADER = "skymem-object-versions 1"
FILE_NAME = "object-versions"
DELETED = "deleted"


class LedgerError(ValueError):
    """A ledger file that cannot be read or written, in one line naming the file (and the line)."""


@dataclass(frozen=True, order=True)
class Seen:
    """One version of an object as the ground saw it; ordered oldest to newest."""

    created_ms: int
    repaired_ms: int = 0
    version: str = ""  # the data's version (hex), or DELETED for a tombstone

    @property
    def deleted(self) -> bool:
        return self.version == DELETED

    @classmethod
    def of_meta(cls, meta: dict) -> "Seen":
        """The version a metadata dict (objects.open_metadata's) describes."""
        if meta.get("deleted"):
            return cls(meta["created_ms"], 0, DELETED)
        return cls(meta["created_ms"], meta.get("repaired_ms", 0), meta.get("version", ""))

    def says(self) -> str:
        if self.deleted:
            return f"deleted at mission time {self.created_ms} ms"
        made = f"made at mission time {self.created_ms} ms"
        return made + (f", repaired at {self.repaired_ms} ms" if self.repaired_ms else "")


class VersionLedger:
    """The newest Seen per object key, in a file shared by this ground host's processes."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    @classmethod
    def beside(cls, content_key_file: str | Path) -> "VersionLedger":
        """The ledger of the ground that holds this content key file."""
        return cls(Path(content_key_file).parent / FILE_NAME)

    def newest(self, key: bytes) -> Seen | None:
        try:
            with open(self.path, encoding="ascii") as f:
                fcntl.flock(f, fcntl.LOCK_SH)
                return self._parse(f.read().splitlines()).get(key.hex())
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise LedgerError(f"cannot read the ledger of object versions {self.path}: {exc.strerror}") from None

    def note(self, key: bytes, seen: Seen) -> Seen:
        """Record `seen` for `key` unless the ledger already holds it or a newer one; the newest, after.
        LedgerError when the file cannot be written: a get or put that cannot remember what it saw fails, in
        one line, rather than leave the next get open to a rollback."""
        try:
            return self._note(key, seen)
        except OSError as exc:
            raise LedgerError(f"cannot write the ledger of object versions {self.path}: {exc.strerror}") from None

    def check_writable(self) -> None:
        """LedgerError unless the file can be written: a put or delete asks before it changes anything, so that
        it never stores a version it cannot then remember."""
        try:
            os.close(os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600))
        except OSError as exc:
            raise LedgerError(f"cannot write the ledger of object versions {self.path}: {exc.strerror}") from None

    def _note(self, key: bytes, seen: Seen) -> Seen:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
        with os.fdopen(fd, "r+", encoding="ascii") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            f.seek(0)
            lines = f.read().splitlines()
            known = self._parse(lines).get(key.hex())
            if known is not None and known >= seen:
                return known
            if not lines:
                f.write(HEADER + "\n")
            f.write(f"{key.hex()} {seen.created_ms} {seen.repaired_ms} {seen.version or '-'}\n")
            f.flush()
            os.fsync(f.fileno())
            return seen

    def _parse(self, lines: list[str]) -> dict[str, Seen]:
        if lines and lines[0] != HEADER:
            raise LedgerError(f"{self.path}:1: expected \"{HEADER}\"")
        newest: dict[str, Seen] = {}
        for number, line in enumerate(lines[1:], start=2):
            parts = line.split()
            if len(parts) != 4 or len(parts[0]) != 64 or not parts[1].isdigit() or not parts[2].isdigit():
                raise LedgerError(f"{self.path}:{number}: expected \"KEY_HEX CREATED_MS REPAIRED_MS VERSION\"")
            seen = Seen(int(parts[1]), int(parts[2]), "" if parts[3] == "-" else parts[3])
            if parts[0] not in newest or newest[parts[0]] < seen:
                newest[parts[0]] = seen
        return newest
