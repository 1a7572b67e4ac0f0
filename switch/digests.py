"""Digest batching with P4Runtime's DigestEntry semantics (what PI does on top of BMv2).

A digest is delivered only once the controller configured it (DigestEntry insert). Samples
are batched into a DigestList of at most `max_list_size` samples (0 = no limit) and sent
when the list is full or at the next tick of a `max_timeout_ns` clock (started by the
digest's first sample) after its first sample: no sample waits longer than the timeout,
as P4Runtime asks, and a steady stream of samples gets a list exactly every timeout, where
timing each list from its own first sample let the lists drift later by the wait for that
sample (the controller decides on the lists: controller/app.py `Ticker`). A sample equal
to one already sent is suppressed until the controller acks the list that carried it, or
until `ack_timeout_ns` passes: the controller is never flooded with data it already has.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, field

Sample = tuple[int, ...]
MAX_UNACKED_LISTS = 4096  # beyond this the oldest unacked list is forgotten (bounded memory)
Sink = Callable[[int, int, list[Sample]], None]  # (learn list id, list id, samples)


@dataclass
class DigestConfig:
    max_timeout_ns: int = 0
    max_list_size: int = 1
    ack_timeout_ns: int = 0


@dataclass
class _Pending:
    config: DigestConfig
    samples: list[Sample] = field(default_factory=list)
    due: float | None = None  # when the samples go: a tick of the timeout's clock
    clock_at: float | None = None  # one tick of that clock (the first sample's time + timeout)
    unacked: dict[int, tuple[float, list[Sample]]] = field(default_factory=dict)
    filtered: dict[Sample, int] = field(default_factory=dict)  # sample -> list id carrying it


class DigestEngine:
    def __init__(self, sink: Sink | None = None) -> None:
        self.sink = sink
        self.pending: dict[int, _Pending] = {}
        self._list_ids = itertools.count(1)
        self.suppressed = 0

    def configure(self, learn_id: int, config: DigestConfig | None) -> None:
        """Enable (or, with None, disable) delivery of one digest."""
        if config is None:
            self.pending.pop(learn_id, None)
        elif learn_id in self.pending:
            p = self.pending[learn_id]
            p.config, p.clock_at = config, None
        else:
            self.pending[learn_id] = _Pending(config)

    def config(self, learn_id: int) -> DigestConfig | None:
        p = self.pending.get(learn_id)
        return p.config if p else None

    def learn(self, learn_id: int, sample: Sample, now: float) -> None:
        p = self.pending.get(learn_id)
        if p is None:
            return
        if sample in p.filtered or sample in p.samples:
            self.suppressed += 1
            return
        if not p.samples:
            p.due = self._next_tick(p, now)
        p.samples.append(sample)
        limit = p.config.max_list_size
        if (limit and len(p.samples) >= limit) or p.config.max_timeout_ns == 0:
            self._flush(learn_id, p, now)

    def poll(self, now: float) -> float | None:
        """Send lists whose timeout passed, expire unacked lists; the next time to call again."""
        wake: float | None = None
        for learn_id, p in self.pending.items():
            if p.samples and p.due is not None:
                if p.due <= now:
                    self._flush(learn_id, p, now)
                else:
                    wake = p.due if wake is None else min(wake, p.due)
            if p.config.ack_timeout_ns:
                for list_id, (sent_at, samples) in list(p.unacked.items()):
                    expiry = sent_at + p.config.ack_timeout_ns / 1e9
                    if expiry <= now:
                        self._release(p, list_id, samples)
                    else:
                        wake = expiry if wake is None else min(wake, expiry)
        return wake

    @staticmethod
    def _next_tick(p: _Pending, now: float) -> float:
        """The first tick of the digest's timeout clock after `now` (the clock starts one
        timeout after the first sample ever; a new timeout restarts it)."""
        timeout_s = p.config.max_timeout_ns / 1e9
        if p.clock_at is None or timeout_s <= 0:
            p.clock_at = now + timeout_s
            return p.clock_at
        return p.clock_at + math.ceil(max(0.0, now - p.clock_at) / timeout_s) * timeout_s

    def forget_unacked(self) -> None:
        """A new primary controller starts with nothing suppressed."""
        for p in self.pending.values():
            p.unacked.clear()
            p.filtered.clear()

    def ack(self, learn_id: int, list_id: int) -> None:
        p = self.pending.get(learn_id)
        if p and list_id in p.unacked:
            self._release(p, list_id, p.unacked[list_id][1])

    @staticmethod
    def _release(p: _Pending, list_id: int, samples: list[Sample]) -> None:
        del p.unacked[list_id]
        for s in samples:
            if p.filtered.get(s) == list_id:
                del p.filtered[s]

    def _flush(self, learn_id: int, p: _Pending, now: float) -> None:
        samples, p.samples = p.samples, []
        list_id = next(self._list_ids)
        p.unacked[list_id] = (now, samples)
        if len(p.unacked) > MAX_UNACKED_LISTS:
            oldest = next(iter(p.unacked))
            self._release(p, oldest, p.unacked[oldest][1])
        for s in samples:
            p.filtered[s] = list_id
        if self.sink is not None:
            self.sink(learn_id, list_id, samples)
