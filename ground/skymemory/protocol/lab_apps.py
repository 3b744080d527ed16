"""Commands of the stock cFS lab apps that a SkyMemory ground station sends.

TO_LAB forwards the telemetry it subscribes to only after its enable-output
command: MID 0x1880 (TO_LAB_CMD_MID), function code 6 (TO_LAB_OUTPUT_ENABLE_CC),
payload `char dest_IP[16]`, to that address and the port its build fixes
(TO_LAB_TLM_PORT, 1235). These are to_lab's defaults; the same packet as

    cmdUtil --pktid=0x1880 --cmdcode=6 --string=16:127.0.1.1
"""

from __future__ import annotations

import ipaddress

from skymemory.protocol import wire
from skymemory.protocol.errors import WireError

TO_LAB_CMD_MID = 0x1880
TO_LAB_OUTPUT_ENABLE_CC = 6
TO_LAB_DEST_IP_LEN = 16


def to_lab_enable_output(dest_ip: str) -> bytes:
    """TO_LAB's enable-output command: send subscribed telemetry to dest_ip."""
    try:
        text = str(ipaddress.IPv4Address(dest_ip))
    except ValueError:
        raise WireError(f"TO_LAB needs an IPv4 address, got {dest_ip!r}") from None
    return wire.encode_command(TO_LAB_CMD_MID, TO_LAB_OUTPUT_ENABLE_CC, text.encode().ljust(TO_LAB_DEST_IP_LEN, b"\0"))
