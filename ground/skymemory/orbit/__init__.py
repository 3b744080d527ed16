"""The constellation as geometry and layout: pure functions and descriptions, no sockets.

geometry        orbital period, light-time delays, the time-varying inter-plane distance D_N(t)
constellation   the planes x sats torus: the satellite overhead a ground host at any mission time
placement       the paper's layouts (baseline, rotation-aware, hop-aware, both): which satellite holds chunk i
migration       where a block's chunks move at each rotation step (the plan, not the sending)
manifest        a launched constellation: its satellites' addresses, ports, link profile (JSON)
manifest_check  the manifest's schema: every field's type and range, checked before anything uses it
sim             the paper's worst-case get/set latency simulator (Figure 16, Table 2)
layout_plot     pictures of the layouts (matplotlib)

The lowest layer of the ground package: it imports no other part of skymemory.
"""
