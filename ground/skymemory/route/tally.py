"""What the router did, counted for GET /router: requests and prompt tokens each way, what crossed the link."""

from __future__ import annotations

import threading


class Tally:
    FIELDS = ("requests_straight", "requests_offloaded", "requests_refused", "site_errors",
              "prompt_tokens_straight", "prompt_tokens_offloaded", "cached_tokens", "kv_bytes_crossed",
              "prefill_site_s")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts = dict.fromkeys(self.FIELDS, 0)

    def add(self, **counts) -> None:
        with self._lock:
            for name, value in counts.items():
                self._counts[name] += value

    def snapshot(self) -> dict:
        with self._lock:
            return dict(self._counts)
