"""Bytes on the wire: the CCSDS packets satellites and ground exchange, and their checks.

wire           encode / decode every command, reply and telemetry packet (docs/PROTOCOL.md), on spacepacket
native         the flight core's C codec and CRC32C through cffi (skymemory._native), pure-Python fallbacks
auth           command and reply authentication (keys, signer, the trailer)
mac            the trailer's tag: POLYVAL under AES-128, in C through native or in pure Python
seal           sealed content: AES-128-GCM per chunk under the ground's content keys, a key per tenant
seal_layout    how a block is cut into chunks (chunk size, k, m), as every sealed chunk's associated data binds it
stripes        coded stripes: k data + m parity chunks, any k give the data back (Reed-Solomon, Intel ISA-L)
telemetry      ccsdspy definitions of the housekeeping and STATS packets
housekeeping   the apps' housekeeping as it reaches the ground (TO_LAB or --tlm-dest)
lab_apps       the cFS lab apps' commands the ground needs (TO_LAB enable, SCH_LAB)
errors         SkyMemoryError and its kinds (NAK, timeout, bad reply, ...)

Above skymemory.orbit (housekeeping reads a manifest); below everything that sends.
"""
