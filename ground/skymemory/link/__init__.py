"""Moving packets between the ground host and the satellites.

bell           ProgressBell: an eventfd a streamed get rings when its reader's chunks are in
client         SkyMemoryClient: asyncio UDP client for single-chunk commands (window, retries, typed errors)
fastpath       BulkTransfer: whole blocks in one C call (sendmmsg / recvmmsg, CRC32C checked in C)
loop_thread    a private event-loop thread, for the synchronous stores built on the asyncio client

Above skymemory.protocol; below the block stores.
"""
