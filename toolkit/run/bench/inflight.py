"""The serving client's own view of its load: requests sent and not yet finished, how many of them
have received their first token (their prefill is done: from then on they only decode), and the
tokens received so far.

A server need not expose its batch (sglang 0.5.23's internal_states has no running-request count),
but the load generator knows its own requests: with `concurrency` requests in flight and every one of
them past its first token, each forward step the server runs is a decode step over all of them.
`patchbench profile` starts recording at that moment (`steady`), and reads from each request's token
arrivals (`arrivals`: perf_counter time, tokens) which inter-token latencies fell inside the
profiled steps (toolkit.profile.window)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field


@dataclass
class InFlight:
    in_flight: int = 0  # sent, not finished
    decoding: int = 0  # of those, past their first token
    tokens: int = 0  # tokens received, all requests
    finished: int = 0
    arrivals: list = field(default_factory=list)  # one list of (perf_counter time, tokens) per request
    changed: asyncio.Event = field(default_factory=asyncio.Event, repr=False)

    def steady(self, concurrency: int) -> bool:
        """`concurrency` requests in flight and all of them decoding."""
        return self.in_flight >= concurrency and self.decoding == self.in_flight

    def request(self) -> "Ticket":
        """One request sent: the client tells its ticket what happens to it, then closes it."""
        self.in_flight += 1
        self.changed.set()
        ticket = Ticket(self)
        self.arrivals.append(ticket.arrivals)
        return ticket

    async def wait_steady(self, concurrency: int, timeout: float) -> bool:
        """Wait (at most `timeout` s) until `steady(concurrency)`; False when it never came."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not self.steady(concurrency):
            left = deadline - loop.time()
            if left <= 0:
                return False
            self.changed.clear()
            try:
                await asyncio.wait_for(self.changed.wait(), left)
            except asyncio.TimeoutError:
                return self.steady(concurrency)
        return True


@dataclass
class Ticket:
    owner: InFlight
    decoding: bool = False
    closed: bool = False
    arrivals: list = field(default_factory=list)  # (perf_counter time, tokens) of each arrival

    def received(self, k: int, at: float | None = None) -> None:
        """`k` new tokens arrived (at perf_counter time `at`; the first ones make the request a decoding one)."""
        self.owner.tokens += k
        if at is not None:
            self.arrivals.append((at, k))
        if not self.decoding and k > 0:
            self.decoding = True
            self.owner.decoding += 1
            self.owner.changed.set()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.owner.in_flight -= 1
        self.owner.decoding -= int(self.decoding)
        self.owner.finished += 1
        self.owner.changed.set()
