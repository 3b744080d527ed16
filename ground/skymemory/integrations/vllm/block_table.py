"""vLLM's block tables as the engine-neutral paged sides (kv.engine) take them.

A block table lists a request's pages in prompt order. vLLM writes its null block (id 0, a page no request
owns) where a group keeps no page: with a sliding window, the blocks the window has passed. The paged sides
take None there: nothing is loaded into it, nothing saved from it (it holds some other block's bytes, or none).
"""

from __future__ import annotations

NULL_BLOCK = 0  # vllm.v1.core.block_pool's null block: the same id in every request's table, owned by none


def pages(block_ids) -> list[int | None]:
    """A block table with None for vLLM's null block."""
    return [None if block == NULL_BLOCK else int(block) for block in block_ids]
