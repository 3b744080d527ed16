"""A chat workload, as a server meets it: users whose prompts share a system prompt and grow turn by turn.

U users each hold a conversation of T turns. Every prompt is the shared system prompt, the user's history (its
earlier messages and the replies the server gave) and a new message; between turns the user thinks for a
while (exponential, seeded). Token ids are drawn from seeds, so every mode of a benchmark sends the same
messages; the replies are the server's own (greedy), so the history a mode builds is what that server said.

`replay` runs the users against a server, at most `concurrency` conversations at a time, and returns one
Turn per request: its TTFT as the client saw it (first streamed token), the prompt's cached tokens and the
reply's length.
"""

from __future__ import annotations

import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable

FIRST_ID = 3  # token ids 0-2 are special (pad, bos, eos) in the embedded models' tokenizer


@dataclass(frozen=True)
class ChatWorkload:
    users: int = 16
    turns: int = 4
    system_tokens: int = 512  # the system prompt every user's prompt starts with
    message_tokens: int = 64  # each user message
    reply_tokens: int = 32  # each reply (max_tokens)
    think_s: float = 0.5  # mean think time between a reply and the next message
    seed: int = 0
    vocab: int = 32000

    def __post_init__(self) -> None:
        for name in ("users", "turns", "system_tokens", "message_tokens", "reply_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if not self.think_s >= 0:
            raise ValueError(f"think time must be >= 0 s, got {self.think_s}")
        if self.vocab <= FIRST_ID:
            raise ValueError(f"a vocabulary of {self.vocab} tokens has no ordinary token")

    def ids(self, what: str, n: int) -> list[int]:
        rng = random.Random(what)
        return [rng.randrange(FIRST_ID, self.vocab) for _ in range(n)]

    def system(self) -> list[int]:
        return self.ids("system", self.system_tokens)  # every user's, whatever the seed: one deployment's prompt

    def message(self, user: int, turn: int) -> list[int]:
        return self.ids(f"{self.seed}/user {user} turn {turn}", self.message_tokens)  # a seed is a set of users

    def think(self, user: int, turn: int) -> float:
        return random.Random(f"{self.seed}/think {user} {turn}").expovariate(1 / self.think_s) if self.think_s else 0.0

    def longest_prompt(self) -> int:
        return self.system_tokens + self.turns * self.message_tokens + (self.turns - 1) * self.reply_tokens

    def working_set_tokens(self) -> int:
        """Tokens of KV the whole workload keeps alive if nothing is evicted: the system prompt once, and every
        user's whole conversation."""
        per_user = self.turns * (self.message_tokens + self.reply_tokens)
        return self.system_tokens + self.users * per_user


@dataclass
class Turn:
    user: int
    turn: int
    prompt_tokens: int
    cached_tokens: int
    reply_tokens: int
    ttft_s: float
    total_s: float
    started_s: float  # since the replay began


Send = Callable[[list[int], int], "object"]  # (prompt ids, max_tokens) -> an openai_server.Reply


def replay(workload: ChatWorkload, send: Send, concurrency: int, say: Callable[[str], None] | None = None,
           ) -> tuple[list[Turn], float]:
    """Every user's conversation against `send`, at most `concurrency` at once; (turns, wall seconds)."""
    if concurrency < 1:
        raise ValueError(f"concurrency must be at least 1, got {concurrency}")
    turns: list[Turn] = []
    lock = threading.Lock()
    started = time.perf_counter()
    system = workload.system()
    total = workload.users * workload.turns

    stop = threading.Event()  # set when the replay fails or is interrupted: no conversation starts a new turn

    def converse(user: int) -> None:
        history: list[int] = []
        for t in range(workload.turns):
            if stop.is_set():
                return
            prompt = system + history + workload.message(user, t)
            sent = time.perf_counter()
            reply = send(prompt, workload.reply_tokens)
            done = Turn(user, t, reply.prompt_tokens, reply.cached_tokens, len(reply.tokens), reply.ttft_s,
                        reply.total_s, sent - started)
            with lock:
                turns.append(done)
                n = len(turns)
            if say is not None and (n % max(1, total // 8) == 0 or n == total):
                say(f"    {n}/{total} requests, {time.perf_counter() - started:.0f} s")
            history = prompt[len(system):] + reply.tokens
            if t + 1 < workload.turns:
                stop.wait(workload.think(user, t))

    clients = ThreadPoolExecutor(concurrency)
    try:
        for future in [clients.submit(converse, u) for u in range(workload.users)]:
            future.result()  # a failed request fails the replay, naming why
    except BaseException:  # a failure or Ctrl-C: the conversations not started never start, none waits for them
        stop.set()
        clients.shutdown(wait=False, cancel_futures=True)
        raise
    clients.shutdown()
    return turns, time.perf_counter() - started
