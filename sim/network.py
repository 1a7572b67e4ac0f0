"""One time step of the fluid fabric: flows inject bytes, queues serve and mark, acks return.

Model (per step of `dt` seconds):
- each active flow has a backlog at every hop of its path (bytes waiting in that egress
  queue); a link's queue is the sum of the backlogs there; the link serves up to
  capacity·dt, shared in proportion to the backlogs (FIFO on average), a backlog under
  one MTU weighing as one MTU (a last packet leaves after the queue ahead of it, as in
  FIFO, rather than trickling out geometrically);
- bytes served leave `marked` with the RED probability of the P4 program, evaluated on the
  bytes left in the queue (marks are never undone; Not-ECT flows are never marked); served
  bytes move to the next hop, or are delivered at the last one;
- arrivals beyond a queue's buffer are tail-dropped and re-sent by their flow;
- delivered and marked bytes reach the sender one base RTT later (a ring buffer), where
  the transport (transport.py) updates its window or rate;
- a flow completes when all its bytes are delivered; its FCT is recorded.
Per-port counters accumulate exactly the fields of the P4 telemetry digest.

How it runs fast (`run`): flow slots are sized for the busiest moment of an episode, but
admission always fills the lowest free slots, so the flows in flight sit in a prefix of
the slots. Before a run of steps (one telemetry interval), `run` bounds the slots it can
touch — the highest slot in use plus every flow that may start before the run ends — and
steps only that prefix, the smallest of a few static sizes (`prefixes`: 32, 64, ..., all);
the free slots past it stay as they are (admission resets everything a slot holds), and
the feedback ring's columns past it are never read (a flow reads only rows written since
it started). Under `vmap` the largest prefix any episode of the batch needs runs for the
whole batch (a custom batching rule: a batched `lax.switch` would run every size), so the
batch enlarges the kernels instead of multiplying them. The slots left out are free and
would only add exact zeros, so the result is that of stepping every slot up to float
rounding: XLA compiles each prefix's loop on its own and may fuse a product and a sum into
one FMA differently, which can move a byte count in its last bit (measured on testbed24:
DCQCN episodes bit-identical, DCTCP ones identical FCTs for all but the flows a last-bit
difference tips over the 0.5-byte completion test, see sim/README.md).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from ecntune.sim import transport
from ecntune.sim.fabric import MTU_BYTES
from ecntune.telemetry import ELEPHANT_BYTES, SENDER_BITS

ADMIT_PER_STEP = 16  # flows that may start in one step (more wait for the next)


class Params(NamedTuple):
    """Static per episode: links and the flow schedule (JAX arrays)."""

    capacity: jnp.ndarray  # (L,) bytes/s
    buffer: jnp.ndarray  # (L,)
    start: jnp.ndarray  # (N,) flow start times, sorted
    src: jnp.ndarray
    size: jnp.ndarray
    path: jnp.ndarray  # (N, H)
    hops: jnp.ndarray
    base_rtt: jnp.ndarray
    line_rate: jnp.ndarray  # (N,) bytes/s of the source NIC
    capacity_events: jnp.ndarray  # (E, 3): link, time down, time up (failures)
    ect: jnp.ndarray  # (N,) bool: the source negotiated ECN (ECT); the P4 program marks only these


class Counters(NamedTuple):
    """Per directed link, over the current telemetry interval."""

    tx_bytes: jnp.ndarray
    marked_bytes: jnp.ndarray
    qdepth_sum: jnp.ndarray  # queue (bytes) x packets departing
    qdepth_samples: jnp.ndarray  # packets departing
    qdepth_max: jnp.ndarray
    senders: jnp.ndarray  # (L, 64) bool: hashed source hosts seen
    elephant_bytes: jnp.ndarray
    dropped_bytes: jnp.ndarray


class Ledger(NamedTuple):
    """Episode totals in bytes (never reset by telemetry intervals), to check conservation:
    injected = delivered + still queued on a hop + dropped (drops are re-sent: re-injected)."""

    injected: jnp.ndarray
    delivered: jnp.ndarray
    dropped: jnp.ndarray


class NetState(NamedTuple):
    t: jnp.ndarray
    step: jnp.ndarray
    next_flow: jnp.ndarray
    slot: jnp.ndarray  # (F,) flow id or -1
    to_send: jnp.ndarray  # (F,)
    sent: jnp.ndarray
    delivered: jnp.ndarray
    backlog: jnp.ndarray  # (F, H)
    backlog_marked: jnp.ndarray
    cc: transport.CCState
    admitted: jnp.ndarray  # (F,) step at which the slot's flow started
    feedback: jnp.ndarray  # (D, F, 3) acked, ECN-echoed, lost bytes on their way back
    fct: jnp.ndarray  # (N,) seconds, -1 until the flow completes
    counters: Counters
    ledger: Ledger


def zero_counters(n_links: int) -> Counters:
    z = jnp.zeros(n_links, jnp.float32)
    return Counters(z, z, z, z, z, jnp.zeros((n_links, SENDER_BITS), bool), z, z)


def init(params: Params, slots: int, ring: int) -> NetState:
    n_links, hops = params.capacity.shape[0], params.path.shape[1]
    zf = jnp.zeros(slots, jnp.float32)
    return NetState(
        t=jnp.float32(0.0), step=jnp.int32(0), next_flow=jnp.int32(0),
        slot=jnp.full(slots, -1, jnp.int32), to_send=zf, sent=zf, delivered=zf,
        backlog=jnp.zeros((slots, hops), jnp.float32),
        backlog_marked=jnp.zeros((slots, hops), jnp.float32),
        cc=transport.fresh(zf), admitted=jnp.zeros(slots, jnp.int32),
        feedback=jnp.zeros((ring, slots, 3), jnp.float32),
        fct=jnp.full(params.start.shape[0], -1.0, jnp.float32),
        counters=zero_counters(n_links), ledger=Ledger(*(jnp.float32(0.0) for _ in range(3))),
    )  # fmt: skip


def red_probability(q, kmin, kmax, pmax):
    """The P4 program's marking rule: 0 up to kmin, linear to pmax, 1 from kmax (kmax 0: off)."""
    between = pmax * (q - kmin) / jnp.maximum(kmax - kmin, 1.0)
    p = jnp.where(q >= kmax, 1.0, jnp.where(q > kmin, between, 0.0))
    return jnp.where(kmax > 0, p, 0.0)


def _admit(params: Params, s: NetState) -> NetState:
    """Start the flows whose time has come in free slots (at most ADMIT_PER_STEP per step)."""
    n = params.start.shape[0]
    ahead = s.next_flow + jnp.arange(ADMIT_PER_STEP)
    due = (ahead < n) & (params.start[jnp.minimum(ahead, n - 1)] <= s.t)
    k = jnp.sum(jnp.cumprod(due))  # consecutive due flows
    free = s.slot < 0
    rank = jnp.cumsum(free) - 1
    take = free & (rank < k)
    k = jnp.minimum(k, jnp.sum(free))
    fid = jnp.where(take, s.next_flow + rank, -1)
    safe = jnp.maximum(fid, 0)
    line = params.line_rate[safe]
    fresh = transport.fresh(line)
    cc = jax.tree.map(lambda old, new: jnp.where(take, new, old), s.cc, fresh)
    return s._replace(
        next_flow=s.next_flow + k,
        slot=jnp.where(take, fid, s.slot),
        admitted=jnp.where(take, s.step, s.admitted),
        to_send=jnp.where(take, params.size[safe], s.to_send),
        sent=jnp.where(take, 0.0, s.sent),
        delivered=jnp.where(take, 0.0, s.delivered),
        backlog=jnp.where(take[:, None], 0.0, s.backlog),
        backlog_marked=jnp.where(take[:, None], 0.0, s.backlog_marked),
        cc=cc,
    )


def step(params: Params, s: NetState, thresholds: jnp.ndarray, dt: float, kind: str) -> NetState:
    """Advance by dt. thresholds: (L, 3) kmin, kmax, pmax per directed link (kmax 0: no ECN)."""
    s = _admit(params, s)
    n_links = params.capacity.shape[0]
    active = s.slot >= 0
    fid = jnp.maximum(s.slot, 0)
    path = params.path[fid]  # (F, H)
    hop_ok = (path >= 0) & active[:, None]
    link = jnp.where(hop_ok, path, 0)
    last_hop = params.hops[fid] - 1

    down = (s.t >= params.capacity_events[:, 1]) & (s.t < params.capacity_events[:, 2])
    failed = jnp.zeros(n_links, bool).at[params.capacity_events[:, 0].astype(jnp.int32)].max(down)
    capacity = jnp.where(failed, 0.0, params.capacity)

    def queue_of(*per_hop: jnp.ndarray) -> jnp.ndarray:
        """Sum (F, H) per-hop amounts onto their links: (L,), or (L, k) for k amounts at
        once (one scatter instead of k: scatters dominate a step on CPU)."""
        b = jnp.stack(per_hop, axis=-1)
        out = jax.ops.segment_sum(
            jnp.where(hop_ok[..., None], b, 0.0).reshape(-1, len(per_hop)), link.ravel(), n_links
        )
        return out[:, 0] if len(per_hop) == 1 else out

    # 1. senders inject at their congestion-controlled rate
    q = queue_of(s.backlog)
    qdelay = jnp.sum(jnp.where(hop_ok, q[link] / jnp.maximum(capacity[link], 1.0), 0.0), axis=1)
    rtt = params.base_rtt[fid] + qdelay
    rate = transport.send_rate(kind, s.cc, rtt, params.line_rate[fid])
    inject = jnp.where(active, jnp.minimum(s.to_send, rate * dt), 0.0)
    backlog = s.backlog.at[:, 0].add(inject)

    # 2. every queue serves capacity·dt, shared by backlog — a backlog under one packet
    #    weighs as a whole packet, so a flow's last packet leaves after the queue ahead of
    #    it (FIFO) instead of decaying geometrically; departures are marked
    weight = jnp.where(hop_ok & (backlog > 0), jnp.maximum(backlog, MTU_BYTES), 0.0)
    q, total_weight = queue_of(backlog, weight).T
    allowance = capacity[link] * dt * weight / jnp.maximum(total_weight[link], 1e-9)
    dep = jnp.where(hop_ok, jnp.minimum(backlog, allowance), 0.0)
    served = queue_of(dep)
    q_left = jnp.maximum(q - served, 0.0)
    kmin, kmax, pmax = thresholds[:, 0], thresholds[:, 1], thresholds[:, 2]
    p_mark = red_probability(q_left, kmin, kmax, pmax)
    frac = jnp.where(backlog > 0, dep / jnp.maximum(backlog, 1e-9), 0.0)
    dep_marked_before = jnp.where(hop_ok, s.backlog_marked * frac, 0.0)
    ect = params.ect[fid][:, None]  # non-ECT packets are never marked (the P4 program's rule)
    new_marks = jnp.where(ect, (dep - dep_marked_before) * p_mark[link], 0.0)
    dep_marked = dep_marked_before + new_marks
    backlog = backlog - dep
    backlog_marked = s.backlog_marked - dep_marked_before

    # 3. departures move one hop on, or are delivered at the last hop
    hop_idx = jnp.arange(path.shape[1])[None, :]
    at_last = hop_idx == last_hop[:, None]
    moving = jnp.where(at_last, 0.0, dep)
    moving_marked = jnp.where(at_last, 0.0, dep_marked)
    arrive = jnp.pad(moving, ((0, 0), (1, 0)))[:, :-1]
    arrive_marked = jnp.pad(moving_marked, ((0, 0), (1, 0)))[:, :-1]
    delivered = jnp.sum(jnp.where(at_last, dep, 0.0), axis=1)
    delivered_marked = jnp.sum(jnp.where(at_last, dep_marked, 0.0), axis=1)

    # 4. tail drop what does not fit behind the queue's buffer; the sender re-sends it
    #    (injected bytes were already queued at the NIC in step 1)
    q_after, arrivals = queue_of(backlog + arrive, arrive).T
    overflow = jnp.maximum(0.0, q_after - params.buffer)
    drop_frac = jnp.where(
        arrivals > 0, jnp.minimum(1.0, overflow / jnp.maximum(arrivals, 1e-9)), 0.0
    )
    dropped = jnp.where(hop_ok, arrive * drop_frac[link], 0.0)
    keep = 1.0 - jnp.where(hop_ok, drop_frac[link], 0.0)
    backlog = backlog + arrive * keep
    backlog_marked = backlog_marked + arrive_marked * keep
    lost = jnp.sum(dropped, axis=1)

    # 5. acks (and echoed marks, losses) come back one base RTT later: this step's
    #    feedback fills the ring's current row, and each slot reads the row written
    #    `delay` steps ago, if its flow had started by then (rows left by the slot's
    #    previous flow are never read): O(slots) work a step, not O(ring x slots)
    ring = s.feedback.shape[0]
    delay = jnp.clip(jnp.round(params.base_rtt[fid] / dt).astype(jnp.int32), 1, ring - 1)
    cols = jnp.arange(s.slot.shape[0])
    due = s.feedback[(s.step - delay) % ring, cols] * (s.step - s.admitted >= delay)[:, None]
    acked, echoed, lost_fb = due[:, 0], due[:, 1], due[:, 2]
    # the new row depends on the read (+ 0·due): XLA then reads before it writes the ring in
    # place; with no such order between them it copies the whole ring twice a step
    row = jnp.stack([delivered, delivered_marked, lost], axis=-1) + 0.0 * due
    feedback = jax.lax.dynamic_update_slice_in_dim(s.feedback, row[None], s.step % ring, 0)
    cc = transport.UPDATES[kind](s.cc, acked, echoed, lost_fb, dt, params.line_rate[fid])
    cc = transport.cwnd_limited(s.cc, cc, params.line_rate[fid] * rtt)

    # 6. completions: every byte delivered. float32 sums can leave a flow a fraction of a
    #    byte short of its size (0.5-byte resolution past 4 MB) with nothing left to send
    #    or queued: that flow is complete too, not stuck forever
    total_delivered = s.delivered + delivered
    to_send = s.to_send - inject + lost
    emptied = (to_send <= 0.5) & (jnp.sum(jnp.where(hop_ok, backlog, 0.0), axis=1) <= 0.5)
    done = active & ((total_delivered >= params.size[fid] - 0.5) | emptied)
    fct = s.fct.at[jnp.where(done, fid, params.start.shape[0])].set(
        s.t + dt - params.start[fid] + params.base_rtt[fid] / 2, mode="drop"
    )

    # 7. per-link counters (the telemetry digest's fields)
    c = s.counters
    pkts = served / MTU_BYTES
    src_bit = (params.src[fid] * 40503 % SENDER_BITS).astype(jnp.int32)  # a multiplicative hash
    elephant = jnp.where((s.sent + inject)[:, None] > ELEPHANT_BYTES, dep, 0.0)
    marked_at, elephant_at, dropped_at = queue_of(new_marks, elephant, dropped).T
    counters = Counters(
        tx_bytes=c.tx_bytes + served,
        marked_bytes=c.marked_bytes + marked_at,
        qdepth_sum=c.qdepth_sum + q_left * pkts,
        qdepth_samples=c.qdepth_samples + pkts,
        qdepth_max=jnp.maximum(c.qdepth_max, jnp.where(served > 0, q_left, 0.0)),
        senders=c.senders.at[link, src_bit[:, None]].max(dep > 0),  # in place
        elephant_bytes=c.elephant_bytes + elephant_at,
        dropped_bytes=c.dropped_bytes + dropped_at,
    )
    keep_slot = active & ~done
    return NetState(
        t=s.t + dt,
        step=s.step + 1,
        next_flow=s.next_flow,
        slot=jnp.where(keep_slot, s.slot, -1),
        to_send=jnp.where(keep_slot, to_send, 0.0),
        sent=s.sent + inject,
        delivered=jnp.where(keep_slot, total_delivered, 0.0),
        backlog=jnp.where(keep_slot[:, None], backlog, 0.0),
        backlog_marked=jnp.where(keep_slot[:, None], backlog_marked, 0.0),
        cc=cc,
        admitted=s.admitted,
        feedback=feedback,
        fct=fct,
        counters=counters,
        ledger=Ledger(
            injected=s.ledger.injected + jnp.sum(inject),
            delivered=s.ledger.delivered + jnp.sum(delivered),
            dropped=s.ledger.dropped + jnp.sum(lost),
        ),
    )


MIN_PREFIX = 32  # the smallest slot prefix `run` steps; then doubling up to all slots
PER_SLOT = ("slot", "to_send", "sent", "delivered", "backlog", "backlog_marked", "cc", "admitted")


def prefixes(slots: int) -> tuple[int, ...]:
    """The static slot-prefix sizes `run` may step: 32, 64, ... and all `slots`."""
    sizes = []
    k = MIN_PREFIX
    while k < slots:
        sizes.append(k)
        k *= 2
    return (*sizes, slots)


def slots_needed(params: Params, s: NetState, steps: int, dt: float) -> jnp.ndarray:
    """An upper bound of the slots the next `steps` steps touch: the highest slot in use,
    plus every flow that starts by then (each takes the lowest free slot)."""
    used = jnp.max(jnp.where(s.slot >= 0, jnp.arange(1, s.slot.shape[0] + 1), 0))
    t_end = s.t + (steps + 2) * dt  # a margin over t's float32 accumulation
    starting = jnp.searchsorted(params.start, t_end, side="right") - s.next_flow
    return used + starting


def run(
    params: Params,
    s: NetState,
    thresholds: jnp.ndarray,
    dt: float,
    kind: str,
    steps: int,
    record: Callable[[Params, NetState], Any] | None = None,
) -> tuple[NetState, Any]:
    """`steps` steps (a lax.scan) on the smallest slot prefix that holds them (module
    docstring): the result of scanning `step` over every slot, up to float rounding.
    `record(params, state)` after each step gives the scan's stacked output (None: nothing);
    it takes params as an argument, not from a closure (under vmap a closure over batched
    params would hide them from `_switch_batch_max`'s batching rule)."""
    slots = s.slot.shape[0]
    sizes = prefixes(slots)
    branches = tuple(
        functools.partial(_run_prefix, dt=dt, kind=kind, steps=steps, k=k, record=record)
        for k in sizes
    )
    if len(sizes) == 1:
        return branches[0](params, s, thresholds)
    need = slots_needed(params, s, steps, dt)
    which = jnp.searchsorted(jnp.asarray(sizes[:-1]), need).astype(jnp.int32)
    return _switch_batch_max(branches, which, params, s, thresholds)


def _run_prefix(params, s, thresholds, dt, kind, steps, k, record):
    full = s
    if k < s.slot.shape[0]:
        cut = {name: jax.tree.map(lambda x: x[:k], getattr(s, name)) for name in PER_SLOT}
        s = s._replace(feedback=s.feedback[:, :k], **cut)

    def one(n: NetState, _: None) -> tuple[NetState, Any]:
        n = step(params, n, thresholds, dt, kind)
        return n, (None if record is None else record(params, n))

    s, out = jax.lax.scan(one, s, None, length=steps)
    if k < full.slot.shape[0]:  # the prefix back into the full per-slot arrays
        put = functools.partial(jax.tree.map, lambda old, x: old.at[:k].set(x))
        back = {name: put(getattr(full, name), getattr(s, name)) for name in PER_SLOT}
        s = s._replace(feedback=full.feedback.at[:, :k].set(s.feedback), **back)
    return s, out


def _switch_batch_max(branches, which, *operands):
    """lax.switch(which, branches, *operands); under vmap the branch of the largest `which`
    in the batch runs for every element (vmap would otherwise run every branch and select
    per element). Valid here because a larger prefix gives the same result."""

    @jax.custom_batching.custom_vmap
    def switch(which, *operands):
        return jax.lax.switch(which, branches, *operands)

    @switch.def_vmap
    def rule(axis_size, in_batched, which, *operands):
        top = jnp.max(which) if in_batched[0] else which
        axes = tuple(jax.tree.map(lambda b: 0 if b else None, b) for b in in_batched[1:])
        out = jax.lax.switch(top, [jax.vmap(br, in_axes=axes) for br in branches], *operands)
        return out, jax.tree.map(lambda _: True, out)

    return switch(which, *operands)


@functools.partial(jax.jit, static_argnames=("dt", "kind", "steps"))
def trace(
    params: Params, net: NetState, thresholds: jnp.ndarray, dt: float, kind: str, steps: int
) -> tuple[NetState, tuple[jnp.ndarray, jnp.ndarray]]:
    """`steps` raw steps, recording every link's queue and cumulative tx bytes per step.

    Below the environment's telemetry intervals: what validation against an analysis or
    another simulator needs to see (queue oscillations within an RTT).
    """

    def record(p: Params, n: NetState) -> tuple[jnp.ndarray, jnp.ndarray]:
        fid = jnp.maximum(n.slot, 0)
        on = (p.path[fid] >= 0) & (n.slot >= 0)[:, None]
        link = jnp.where(on, p.path[fid], 0)
        q = jax.ops.segment_sum(
            jnp.where(on, n.backlog, 0.0).ravel(), link.ravel(), thresholds.shape[0]
        )
        return q, n.counters.tx_bytes

    return run(params, net, thresholds, dt, kind, steps, record)
