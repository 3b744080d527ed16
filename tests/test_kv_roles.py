"""The cache's roles in a paged engine (vLLM's kv_role, kv.paged.paged_scheduler): a prefill site stores and never
loads, a decode site loads and never stores, and a decode site told that a prefill site stored a request's blocks
asks the orbit again while they are not all found, no longer than recomputing the prompt would take. Against a
scripted record keeper (test_kv_orbit_records); the real sites, satellites and vLLM: tests/vllm_engine/
test_vllm_sites.py."""

from __future__ import annotations

import threading
import time

from skymemory.kv.index.orbit_records import OrbitRecords
from skymemory.kv.index.radix import IndexEntry, RadixIndex
from skymemory.kv.paged.paged_scheduler import PagedScheduler
from skymemory.kv.naming.extra_keys import RequestKeys
from skymemory.store.contract import BlockRecord

from test_kv_orbit_records import ROOT, ScriptedKeeper

BLOCK = 4
PROMPT = list(range(10, 23))  # 3 whole blocks before the last token
GIVE_UP_S = 120  # the scripted orbit answers in milliseconds; a loaded CI machine may take long


def scheduler(keeper, **role) -> PagedScheduler:
    return PagedScheduler(root=ROOT, block_tokens=BLOCK, block_bytes=1000, layers=2, index=RadixIndex(),
                          policy="fetch", orbit=OrbitRecords(keeper), **role)


def settle(s: PagedScheduler, req_id: str, **match) -> tuple[int, int]:
    """Match until the scheduler stops answering "not yet"; (tokens to load, how many "not yet" it said)."""
    give_up, waits = time.monotonic() + GIVE_UP_S, 0
    while (tokens := s.match(req_id, PROMPT, 0, **match)) is None:
        assert time.monotonic() < give_up, "the scheduler said 'not yet' for ever"
        waits += 1
        threading.Event().wait(0.01)
    return tokens, waits


def stored_by_a_prefill_site(keeper: ScriptedKeeper) -> None:
    """What a kv_producer engine's saves leave in orbit: the prompt's block records."""
    site = scheduler(keeper)
    hashes = site.finder.hashes(ROOT, PROMPT, RequestKeys())
    parents = [ROOT, *hashes[:-1]]
    entries = [IndexEntry(h, p, BlockRecord(h, 1000, 500, 2, 123, "explicit", 10, (1, 2), 2),
                          {"kv_format": "fp16", "layout": "sealed", "tokens": BLOCK, "position": i})
               for i, (h, p) in enumerate(zip(hashes, parents))]
    OrbitRecords(keeper).publish(entries)


def planned_saves(s: PagedScheduler, req_id: str) -> int:
    plan = s.step([(req_id, None, [(i,) for i in range(4)], 0)], [], {req_id: len(PROMPT)})
    return len(plan.saves)


def test_a_prefill_site_stores_every_full_block_and_loads_nothing():
    keeper = ScriptedKeeper()
    producer = scheduler(keeper, loads=False)
    assert settle(producer, "p")[0] == 0
    assert planned_saves(producer, "p") == 3
    stored_by_a_prefill_site(keeper)
    assert settle(producer, "q")[0] == 0  # found in orbit, still not loaded: a prefill site computes


def test_a_decode_site_loads_and_stores_nothing():
    keeper = ScriptedKeeper()
    stored_by_a_prefill_site(keeper)
    consumer = scheduler(keeper, saves=False)
    assert settle(consumer, "d")[0] == 3 * BLOCK
    fresh = scheduler(ScriptedKeeper(), saves=False)
    assert settle(fresh, "e")[0] == 0 and planned_saves(fresh, "e") == 0


def test_a_decode_site_waits_for_the_blocks_a_prefill_site_is_still_uploading():
    keeper = ScriptedKeeper()
    consumer = scheduler(keeper, saves=False, prefilled_wait_s=GIVE_UP_S)
    assert consumer.match("d", PROMPT, 0, prefilled_blocks=3) is None
    for _ in range(5):  # nothing in orbit yet: "not yet", and asked again
        threading.Event().wait(0.06)
        assert consumer.match("d", PROMPT, 0, prefilled_blocks=3) is None
    asked = len(keeper.asked)
    stored_by_a_prefill_site(keeper)  # the uploads land
    tokens, _ = settle(consumer, "d", prefilled_blocks=3)
    assert tokens == 3 * BLOCK and asked > 3  # the absent records were asked for again
    said = consumer.finished("d")
    assert "3 blocks from a prefill site, waited on" in said["decision"] and said["fetched_blocks"] == 3


def test_a_decode_site_recomputes_what_does_not_arrive_within_the_bound():
    keeper = ScriptedKeeper()
    bound = 0.3  # no forward measured yet: the connector's load timeout bounds the wait
    consumer = scheduler(keeper, saves=False, prefilled_wait_s=bound)
    began = time.monotonic()
    tokens, waits = settle(consumer, "d", prefilled_blocks=3)
    assert tokens == 0 and waits > 1 and time.monotonic() - began >= bound
    assert settle(consumer, "d", prefilled_blocks=3) == (0, 0)  # given up once: not waited on again


def test_the_wait_is_bounded_by_the_predicted_recompute_once_forwards_are_measured():
    keeper = ScriptedKeeper()
    consumer = scheduler(keeper, saves=False, prefilled_wait_s=GIVE_UP_S)
    for new, seconds in ((16, 0.010), (32, 0.020), (64, 0.040), (1, 0.001)):  # about 0.6 ms a token
        consumer.forwards.observe(new, 0, seconds)
    predicted = consumer.forwards.model().compute_s(len(PROMPT), 0)
    assert predicted < 1.0
    began = time.monotonic()
    tokens, _ = settle(consumer, "d", prefilled_blocks=3)
    assert tokens == 0 and time.monotonic() - began >= predicted  # not the load timeout: far longer
