"""Who may ask, and how often: optional API keys (--api-keys FILE) and a per-client request rate
(--rate-limit), checked by the service before any work, for every front door alike."""

from __future__ import annotations

import collections
import threading
import time
from pathlib import Path

from mt.errors import UserError

WINDOW_S = 60.0  # the rate limit counts the requests of the last minute, as LibreTranslate's does


def read_keys(path: str | Path) -> frozenset[str]:
    """The keys a file holds, one a line (blank lines and # comments skipped)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise UserError(f"--api-keys {path}: cannot read it as UTF-8 text ({e})") from None
    keys = frozenset(line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#"))
    if not keys:
        raise UserError(f"--api-keys {path} holds no key (one a line)")
    return keys


class RateLimiter:
    """At most `per_minute` requests (or texts, for a batch) a client in any minute; 0: no limit."""

    def __init__(self, per_minute: int = 0, clock=time.monotonic):
        self.per_minute, self.clock = per_minute, clock
        self.seen: dict[str, collections.deque] = {}
        self.lock = threading.Lock()

    def admit(self, client: str, cost: int = 1) -> bool:
        if not self.per_minute:
            return True
        now = self.clock()
        with self.lock:
            times = self.seen.setdefault(client, collections.deque())
            while times and times[0] <= now - WINDOW_S:
                times.popleft()
            if len(times) + cost > self.per_minute:
                return False
            times.extend([now] * cost)
            if len(self.seen) > 100_000:  # clients long gone: forget those with nothing in the window
                self.seen = {c: t for c, t in self.seen.items() if t and t[-1] > now - WINDOW_S}
            return True
