"""Which of a paged engine's page tables each layer keeps its pages in (vLLM: its KV cache groups).

An engine with one kind of layer keeps one page table per request: page k holds block k of every layer. An
engine with a hybrid allocator (vLLM's, for models whose layers keep different state) keeps one table per group
of layers: a full-attention group holds a page for every block, a sliding-window group only for the blocks its
window still reads (no page, None, for the others), and a recurrent group (Mamba, gated delta-net) holds at a
block's place the layer's state after that block, where it keeps one.

A request's pages are then `rows`: per block, one page (or None) per table. A block is loaded into and saved
from its row: each attention layer's K/V in its own table's page, each recurrent layer's state in its own.
"""

from __future__ import annotations

from dataclasses import dataclass

Row = tuple  # one block's pages, one per table: int, or None where that table keeps no page for it


@dataclass(frozen=True)
class PageGroups:
    tables: int  # page tables per request
    attention: tuple[int, ...]  # per attention layer, in layer order: the table holding its pages
    recurrent: tuple[int, ...] = ()  # per recurrent layer, in layer order: the table holding its state pages

    @classmethod
    def one_table(cls, attention_layers: int) -> "PageGroups":
        """An engine that keeps every layer's pages in one table."""
        return cls(1, (0,) * attention_layers)

    @property
    def hybrid(self) -> bool:
        """Several tables (the engine's hybrid allocator is on), or state pages: blocks are grouped ones."""
        return self.tables > 1 or bool(self.recurrent)

    def rows(self, tables) -> list[Row]:
        """Per-table page lists (None where a table keeps no page) -> one row per block position."""
        if len(tables) != self.tables:
            raise ValueError(f"{len(tables)} page tables for a model whose layers are in {self.tables}")
        length = max((len(t) for t in tables), default=0)
        return [tuple(t[k] if k < len(t) else None for t in tables) for k in range(length)]

    def loads_into(self, row: Row) -> bool:
        """Whether some attention layer keeps a page of this block (else nothing of it is read: not loaded)."""
        return any(row[table] is not None for table in set(self.attention))

    def saves_from(self, row: Row) -> bool:
        """Whether every attention layer still holds its page of this block (a block is saved whole)."""
        return all(row[table] is not None for table in set(self.attention))
