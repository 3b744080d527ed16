"""`skymemory bench serve`: its chat workload, its replay, its figures and its arguments (no server, no vLLM:
the replay is given a scripted `send` in the server's place; tests/vllm_engine serve through the real one)."""

from __future__ import annotations

import argparse
import importlib.util
import socket
import threading
import time

import pytest

from skymemory.bench import serve as bench_serve
from skymemory.bench.chat import ChatWorkload, Turn, replay
from skymemory.bench.openai_server import Endpoint, Reply, RoundRobin


def test_every_prompt_is_the_system_prompt_the_history_and_a_new_message():
    w = ChatWorkload(users=3, turns=3, system_tokens=20, message_tokens=5, reply_tokens=4, think_s=0, vocab=100)
    sent: dict[int, list[list[int]]] = {}
    lock = threading.Lock()

    def send(prompt, max_tokens):
        assert max_tokens == 4
        user = next(u for u in range(3) if prompt[-5:] in [w.message(u, t) for t in range(3)])
        with lock:
            sent.setdefault(user, []).append(prompt)
        return Reply([90 + user] * 4, len(prompt), 0, 0.01, 0.02)

    turns, wall = replay(w, send, concurrency=2)
    assert len(turns) == 9 and wall > 0
    for user, prompts in sent.items():
        assert [p[:20] for p in prompts] == [w.system()] * 3
        history: list[int] = []
        for t, prompt in enumerate(prompts):
            assert prompt == w.system() + history + w.message(user, t)
            history = prompt[20:] + [90 + user] * 4  # the server's reply joins the history
    assert max(len(p) for ps in sent.values() for p in ps) == w.longest_prompt()


def test_a_seed_is_another_set_of_users_under_the_same_system_prompt():
    a, b = ChatWorkload(seed=0, vocab=500), ChatWorkload(seed=1, vocab=500)
    assert a.system() == b.system() and a.message(0, 0) != b.message(0, 0)
    assert a.message(0, 0) == ChatWorkload(seed=0, vocab=500).message(0, 0)  # the same in every mode
    assert all(3 <= i < 500 for i in a.system() + a.message(2, 1))


def test_no_more_conversations_at_once_than_the_concurrency():
    w = ChatWorkload(users=6, turns=2, system_tokens=4, message_tokens=2, reply_tokens=1, think_s=0, vocab=50)
    in_flight, most, lock = 0, 0, threading.Lock()

    def send(prompt, _max_tokens):
        nonlocal in_flight, most
        with lock:
            in_flight += 1
            most = max(most, in_flight)
        time.sleep(0.01)
        with lock:
            in_flight -= 1
        return Reply([7], len(prompt), 0, 0.0, 0.0)

    turns, _ = replay(w, send, concurrency=3)
    assert len(turns) == 12 and 1 <= most <= 3


def test_a_failed_request_fails_the_replay_naming_why():
    def send(_prompt, _max_tokens):
        raise RuntimeError("vllm serve answered 500")

    with pytest.raises(RuntimeError, match="answered 500"):
        replay(ChatWorkload(users=2, turns=1, think_s=0, vocab=50), send, concurrency=2)


@pytest.mark.parametrize("kw", [{"users": 0}, {"turns": 0}, {"reply_tokens": 0}, {"think_s": -1}, {"vocab": 3}])
def test_a_workload_that_cannot_run_is_refused(kw):
    with pytest.raises(ValueError):
        ChatWorkload(**kw)


def test_the_figures():
    turns = [Turn(0, t, 100, c, 10, s, s + 1, 0.0) for t, (c, s) in enumerate([(0, 0.1), (50, 0.2), (100, 0.3)])]
    engine = {"queue_s": 3.0, "prefill_s": 1.5, "decode_s": 6.0, "preemptions": 2.0}
    c = bench_serve.cell("vllm", 4, turns, wall_s=2.0, engine=engine)
    assert (c["requests"], c["ttft_p50_s"], c["output_tokens_per_s"], c["hit_rate"]) == (3, 0.2, 15.0, 0.5)
    assert (c["engine_queue_s_mean"], c["engine_prefill_s_mean"], c["engine_decode_s_mean"]) == (1.0, 0.5, 2.0)
    assert c["preemptions"] == 2
    assert "| 1.0 / 0.5 / 2.0 | 2 |" in bench_serve.markdown(
        {"config": {**dict.fromkeys(("model", "users", "turns", "system_tokens", "message_tokens", "reply_tokens",
                                     "think_s", "kv", "servers", "planes", "sats"), 1), "kv_blocks": 8,
                    "working_set_tokens": 64},
         "environment": dict.fromkeys(("vllm", "torch", "cpu", "cpu_count"), "x"), "wall_s": 1.0, "cells": [c],
         "comparisons": []})
    assert c["ttft_p99_s"] == pytest.approx(0.298)
    sky = dict(c, mode="sky-laser", ttft_p50_s=0.1, ttft_p99_s=0.298, output_tokens_per_s=30.0)
    (vs,) = bench_serve.comparisons([c, sky])
    assert (vs["ttft_p50_vs_vllm"], vs["throughput_vs_vllm"]) == (0.5, 2.0)
    assert bench_serve.percentile([5.0], 99) == 5.0


def test_the_engine_holds_a_share_of_the_working_set_but_at_least_one_request():
    w = ChatWorkload(users=16, turns=4, system_tokens=512, message_tokens=64, reply_tokens=32)
    assert w.working_set_tokens() == 512 + 16 * 4 * 96
    assert bench_serve.kv_blocks_for(w, 0.25, 128) == 13  # 6,656 tokens / 4, in 128-token blocks
    assert bench_serve.kv_blocks_for(w, 0.01, 128) == 8  # never less than the last turn (896 tokens) and a block


def parser():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd")
    bench_serve.register(sub)
    return p


@pytest.mark.parametrize("argv", [
    ["serve", "--users", "0"], ["serve", "--turns", "x"], ["serve", "--concurrency", "4,4"],
    ["serve", "--concurrency", "0"], ["serve", "--think-s", "-1"], ["serve", "--kv-fraction", "0"],
    ["serve", "--kv-fraction", "1.5"], ["serve", "--kv-blocks", "0"], ["serve", "--profiles", "moon"],
    ["serve", "--servers", "0"], ["serve", "--replicas", "0"], ["serve", "--request-timeout-s", "0"],
])
def test_bad_arguments_are_rejected(argv, capsys):
    with pytest.raises(SystemExit) as e:
        parser().parse_args(argv)
    assert e.value.code == 2 and "error" in capsys.readouterr().err


def test_defaults():
    a = parser().parse_args(["serve"])
    assert (a.users, a.turns, a.system_tokens, a.message_tokens, a.reply_tokens) == (16, 4, 512, 64, 32)
    assert a.concurrency == (1, 4, 16) and a.kv_fraction == 0.25 and [p.name for p in a.profiles] == ["laser", "rf"]
    assert str(a.out) == "docs/results/serve" and a.model == "embedded-tinyllama" and a.request_timeout_s == 300


def test_a_server_that_answers_nothing_in_time_is_a_timeout_naming_the_bound_and_its_log(tmp_path):
    """The client's wait for the next byte is bounded (--request-timeout-s), and saying so names what to raise."""
    with socket.socket() as silent:  # accepts the request and never answers it
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        # the client half only: no `vllm serve` behind this port
        server = Endpoint("127.0.0.1", silent.getsockname()[1], "m", request_timeout_s=0.5,
                          log_path=tmp_path / "vllm.log")
        with pytest.raises(TimeoutError, match=r"sent nothing for 0.5 s on a request of 3 tokens .*vllm\.log"):
            server.stream([1, 2, 3], 4)


def test_more_servers_than_satellites_is_refused_before_any_work(tmp_path, capsys):
    a = parser().parse_args(["serve", "--planes", "3", "--sats", "3", "--servers", "10", "--out", str(tmp_path)])
    assert a.func(a) == 2
    assert capsys.readouterr().err.strip() == "skymemory bench serve: --servers 10 is more than the 3x3 satellites"


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed here")
def test_without_vllm_one_line_says_where_it_is(tmp_path, capsys):
    a = parser().parse_args(["serve", "--out", str(tmp_path)])
    assert a.func(a) == 1
    assert capsys.readouterr().err.splitlines() == [bench_serve.NEEDS_VLLM]


def test_a_failed_conversation_stops_the_others_before_their_next_turn():
    w = ChatWorkload(users=4, turns=50, system_tokens=4, message_tokens=2, reply_tokens=1, think_s=0.05, vocab=50)
    sent = []

    def send(prompt, _max_tokens):
        sent.append(prompt)
        if len(sent) == 6:
            raise RuntimeError("the server went away")
        return Reply([7], len(prompt), 0, 0.0, 0.0)

    with pytest.raises(RuntimeError, match="went away"):
        replay(w, send, concurrency=2)  # returns at once: it does not wait for the other conversations
    after = len(sent)
    time.sleep(0.3)  # several turns' think time: no conversation starts another turn
    assert len(sent) == after < 200


class _Replica:
    """A server in a front's list: notes what it was sent (the front is the unit here)."""

    def __init__(self, name: str) -> None:
        self.name, self.sent = name, []

    def stream(self, ids, max_tokens=16, salt=None):
        self.sent.append((tuple(ids), max_tokens, salt))
        return Reply([1], len(ids), 0, 0.0, 0.0, {"by": self.name})


def test_a_round_robin_front_sends_request_i_to_server_i_mod_n_with_its_salt():
    a, b, c = _Replica("a"), _Replica("b"), _Replica("c")
    front = RoundRobin([a, b, c])
    said = [front.stream([i], 4, "t").said["by"] for i in range(7)]
    assert said == ["a", "b", "c", "a", "b", "c", "a"]
    assert a.sent == [((0,), 4, "t"), ((3,), 4, "t"), ((6,), 4, "t")]
    with pytest.raises(ValueError, match="at least one server"):
        RoundRobin([])


def test_a_user_s_turns_land_on_every_replica_in_turn():
    """Through the replay: one user's consecutive turns go to different servers, so a replica meets histories
    another one computed (what records in orbit are for)."""
    w = ChatWorkload(users=1, turns=4, system_tokens=8, message_tokens=2, reply_tokens=1, think_s=0, vocab=50)
    a, b = _Replica("a"), _Replica("b")
    front = RoundRobin([a, b])
    replay(w, lambda ids, n: front.stream(ids, n, "s"), concurrency=1)
    assert [len(p) for p, _, _ in a.sent] == [10, 16] and [len(p) for p, _, _ in b.sent] == [13, 19]


def test_every_mode_has_a_tenant_of_its_own():
    modes = ["vllm", "sky-laser", "sky-rf", "sky-laser-host", "sky-laser-per-host"]
    assert len({bench_serve.mode_salt(m) for m in modes}) == len(modes)


def test_replicas_are_said_in_the_table():
    result = {"config": {"model": "m", "users": 2, "turns": 2, "system_tokens": 8, "message_tokens": 2,
                         "reply_tokens": 1, "think_s": 0, "concurrency": [4], "kv_blocks": 3,
                         "working_set_tokens": 40, "kv": "fp16", "servers": 10, "planes": 5, "sats": 5,
                         "replicas": 2},
              "environment": {"vllm": "v", "torch": "t", "cpu": "c", "cpu_count": 2}, "wall_s": 1.0,
              "cells": [], "comparisons": []}
    assert "2 servers per mode, each with a ground index of its own, behind a round-robin front" in \
        bench_serve.markdown(result)
