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

How it runs fast (`run`; sim/README.md "Speed" has the measurements). A step costs about
the same per flow slot it touches, and the slots are sized for an episode's busiest
moment, so `run` steps as few slots as it can:
- **prefixes**: a run of steps touches only a prefix of the slots, the smallest of a few
  static sizes (`prefixes`: 32, 48, 64, 96, ..., all) that holds the flows in flight and
  every flow that may start before the run ends (admission fills the lowest free slots);
  the feedback ring's columns past it are never read (a flow reads only rows written
  since it started);
- **compaction**: before each run the flows in flight move to the lowest slots, with
  their per-slot state and ring columns (`_compacted`), so completions that free low
  slots do not leave a sparse prefix behind;
- **stretches**: an interval runs as `STRETCHES` such runs, so each bound counts only the
  flows starting within its stretch;
- under `vmap` the largest prefix any episode of the batch needs runs for the whole batch
  (a custom batching rule: a batched `lax.switch` would run every size), so the batch
  enlarges the kernels instead of multiplying them.
Per step, the work that is not per step is left out of it: admission runs only in steps
where a flow is due (the same batching rule), each slot holds its flow's constants
(`SlotFlow`, copied at admission, not gathered by flow id each step), departures, their
markable and elephant bytes and their arrivals at the next hop are summed onto links in one
scatter and the marking and drop fractions read back in one gather (1.1-1.4x per step
over a scatter and a gather each; sim/README.md), and the senders counter (an OR over the
interval) takes in what each slot saw once per run, not per step.
The slots left out are free and would only add exact zeros; moving flows between slots
changes only the order of float additions onto a link. Measured on testbed24 and star8
(sim/README.md): every FCT identical to the last bit on most episodes, a few tipped over
the 0.5-byte completion test by a last-bit difference, statistics unchanged.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from ecntune.sim import transport
from ecntune.telemetry import ELEPHANT_BYTES, SENDER_BITS
from ecntune.topology import MTU_BYTES

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


class SlotFlow(NamedTuple):
    """What a slot's flow is, copied from Params when it is admitted (F,): a step reads
    them per slot instead of gathering them by flow id (gathers are a step's costliest
    work on CPU after scatters). Kept after the flow completes, until the slot is reused."""

    start: jnp.ndarray
    size: jnp.ndarray
    path: jnp.ndarray  # (F, H), -1 past the last hop
    last_hop: jnp.ndarray
    base_rtt: jnp.ndarray
    line_rate: jnp.ndarray
    ect: jnp.ndarray
    src_bit: jnp.ndarray  # the telemetry's hashed source (SENDER_BITS)

    @staticmethod
    def of(params: Params, fid: jnp.ndarray) -> SlotFlow:
        return SlotFlow(
            start=params.start[fid], size=params.size[fid], path=params.path[fid],
            last_hop=params.hops[fid] - 1, base_rtt=params.base_rtt[fid],
            line_rate=params.line_rate[fid], ect=params.ect[fid],
            src_bit=(params.src[fid] * 40503 % SENDER_BITS).astype(jnp.int32),  # multiplicative
        )  # fmt: skip


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
    flow: SlotFlow
    # (F, H) the flow sent at that hop since the senders counter last took it in
    # (`with_senders`: at the end of a run of steps and before its slot is reused)
    seen: jnp.ndarray
    feedback: jnp.ndarray  # (D, F, 3) acked, ECN-echoed, lost bytes on their way back
    fct: jnp.ndarray  # (N,) seconds, -1 until the flow completes
    counters: Counters
    ledger: Ledger
    queue: jnp.ndarray  # (L,) bytes queued per link as the last step left them


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
        flow=SlotFlow.of(params, jnp.zeros(slots, jnp.int32)),
        seen=jnp.zeros((slots, hops), bool),
        feedback=jnp.zeros((ring, slots, 3), jnp.float32),
        fct=jnp.full(params.start.shape[0], -1.0, jnp.float32),
        counters=zero_counters(n_links), ledger=Ledger(*(jnp.float32(0.0) for _ in range(3))),
        queue=jnp.zeros(n_links, jnp.float32),
    )  # fmt: skip


def red_probability(q, kmin, kmax, pmax):
    """The P4 program's marking rule: 0 up to kmin, linear to pmax, 1 from kmax (kmax 0: off)."""
    between = pmax * (q - kmin) / jnp.maximum(kmax - kmin, 1.0)
    p = jnp.where(q >= kmax, 1.0, jnp.where(q > kmin, between, 0.0))
    return jnp.where(kmax > 0, p, 0.0)


def _as_is(params: Params, s: NetState) -> NetState:
    """Admission's other branch, in a step where no flow is due."""
    return s


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
    s = _fill(params, s, take, s.next_flow + rank)
    return s._replace(next_flow=s.next_flow + k)


def occupy(params: Params, s: NetState, slot: int, flow: int) -> NetState:
    """`flow` started in `slot` now, as admission starts it (for states built by hand)."""
    return _fill(params, s, jnp.arange(s.slot.shape[0]) == slot, jnp.full_like(s.slot, flow))


def with_senders(s: NetState, slots: jnp.ndarray | None = None) -> NetState:
    """The senders counter with what the slots (all, or where `slots`) have seen since it
    last took them in; their `seen` cleared. One scatter per run of steps instead of one
    per step (the counter is an OR over the interval: when a source was seen does not
    matter)."""
    seen = s.seen if slots is None else s.seen & slots[:, None]
    link = jnp.where(s.flow.path >= 0, s.flow.path, 0)
    senders = s.counters.senders.at[link, s.flow.src_bit[:, None]].max(seen)
    return s._replace(counters=s.counters._replace(senders=senders), seen=s.seen & ~seen)


def _fill(params: Params, s: NetState, take: jnp.ndarray, fid: jnp.ndarray) -> NetState:
    """Slot i starts flow fid[i] wherever take[i]: fresh transport, nothing sent yet."""
    fid = jnp.where(take, fid, 0)

    def pick(new: jnp.ndarray, old: jnp.ndarray) -> jnp.ndarray:
        return jnp.where(take.reshape(take.shape + (1,) * (old.ndim - 1)), new, old)

    s = with_senders(s, take)
    flow = jax.tree.map(pick, SlotFlow.of(params, fid), s.flow)
    return s._replace(
        slot=pick(fid, s.slot),
        admitted=pick(s.step, s.admitted),
        to_send=pick(flow.size, s.to_send),
        sent=pick(0.0, s.sent),
        delivered=pick(0.0, s.delivered),
        backlog=pick(0.0, s.backlog),
        backlog_marked=pick(0.0, s.backlog_marked),
        cc=jax.tree.map(pick, transport.fresh(flow.line_rate), s.cc),
        flow=flow,
    )


def step(params: Params, s: NetState, thresholds: jnp.ndarray, dt: float, kind: str) -> NetState:
    """Advance by dt. thresholds: (L, 3) kmin, kmax, pmax per directed link (kmax 0: no ECN)."""
    # admission only in the steps where a flow is due (one in ~100 on testbed24; under vmap
    # where one episode of the batch has one: admitting nothing is a no-op for the others)
    n = params.start.shape[0]
    due = (s.next_flow < n) & (params.start[jnp.minimum(s.next_flow, n - 1)] <= s.t)
    s = _switch_batch_max((_as_is, _admit), due.astype(jnp.int32), params, s)
    n_links = params.capacity.shape[0]
    active = s.slot >= 0
    f = s.flow
    hop_ok = (f.path >= 0) & active[:, None]
    # link 0 stands in for hops a slot does not have; backlogs there are always zero (bytes
    # enter at hop 0 of an active slot and move only along its path; freed slots are
    # zeroed), so what is computed from backlogs needs no mask and adds only zeros to it
    link = jnp.where(hop_ok, f.path, 0)

    down = (s.t >= params.capacity_events[:, 1]) & (s.t < params.capacity_events[:, 2])
    failed = jnp.zeros(n_links, bool).at[params.capacity_events[:, 0].astype(jnp.int32)].max(down)
    capacity = jnp.where(failed, 0.0, params.capacity)

    def queue_of(*per_hop: jnp.ndarray) -> jnp.ndarray:
        """Sum (F, H) per-hop amounts onto their links: (L,), or (L, k) for k amounts at
        once (one scatter instead of k: scatters dominate a step on CPU)."""
        b = jnp.stack(per_hop, axis=-1)
        out = jax.ops.segment_sum(b.reshape(-1, len(per_hop)), link.ravel(), n_links)
        return out[:, 0] if len(per_hop) == 1 else out

    # 1. senders inject at their congestion-controlled rate
    q = s.queue  # the backlogs summed by the last step (less any a completion let go)
    qdelay = jnp.sum(jnp.where(hop_ok, q[link] / jnp.maximum(capacity[link], 1.0), 0.0), axis=1)
    rtt = f.base_rtt + qdelay
    allowed = transport.injectable(kind, s.cc, s.sent, rtt, f.line_rate, dt)
    inject = jnp.where(active, jnp.minimum(s.to_send, allowed), 0.0)
    backlog = s.backlog.at[:, 0].add(inject)

    # 2. every queue serves capacity·dt, shared by backlog — a backlog under one packet
    #    weighs as a whole packet, so a flow's last packet leaves after the queue ahead of
    #    it (FIFO) instead of decaying geometrically; departures are marked
    weight = jnp.where(backlog > 0, jnp.maximum(backlog, MTU_BYTES), 0.0)
    q, total_weight = queue_of(backlog, weight).T
    allowance = capacity[link] * dt * weight / jnp.maximum(total_weight[link], 1e-9)
    dep = jnp.minimum(backlog, allowance)
    frac = jnp.where(backlog > 0, dep / jnp.maximum(backlog, 1e-9), 0.0)
    dep_marked_before = s.backlog_marked * frac
    ect = f.ect[:, None]  # non-ECT packets are never marked (the P4 program's rule)
    markable = jnp.where(ect, dep - dep_marked_before, 0.0)  # ECT bytes not yet marked
    elephant = jnp.where((s.sent + inject)[:, None] > ELEPHANT_BYTES, dep, 0.0)
    # departures move one hop on (arriving at the next hop's link), or are delivered at the
    # last hop
    hop_idx = jnp.arange(f.path.shape[1])[None, :]
    at_last = hop_idx == f.last_hop[:, None]

    def next_hop(x: jnp.ndarray) -> jnp.ndarray:
        """(F, H) amounts leaving each hop, as they arrive at the next (none past the last)."""
        return jnp.pad(jnp.where(at_last, 0.0, x), ((0, 0), (1, 0)))[:, :-1]

    arrive = next_hop(dep)
    # one scatter for everything that leaves and arrives: a link marks p_mark of its
    # markable bytes
    served, markable_at, elephant_at, arrivals = queue_of(dep, markable, elephant, arrive).T
    q_left = jnp.maximum(q - served, 0.0)
    kmin, kmax, pmax = thresholds[:, 0], thresholds[:, 1], thresholds[:, 2]
    p_mark = red_probability(q_left, kmin, kmax, pmax)

    # 3. tail drop what does not fit behind the queue's buffer; the sender re-sends it
    #    (injected bytes were already queued at the NIC in step 1)
    q_after = q_left + arrivals
    overflow = jnp.maximum(0.0, q_after - params.buffer)
    drop_frac = jnp.where(
        arrivals > 0, jnp.minimum(1.0, overflow / jnp.maximum(arrivals, 1e-9)), 0.0
    )
    # both back to the slots' hops in one gather
    p_mark_at, drop_frac_at = jnp.stack([p_mark, drop_frac], axis=-1)[link].transpose(2, 0, 1)

    # 4. served bytes leave marked, move one hop on or are delivered
    dep_marked = dep_marked_before + markable * p_mark_at
    backlog = backlog - dep
    backlog_marked = s.backlog_marked - dep_marked_before
    arrive_marked = next_hop(dep_marked)
    delivered = jnp.sum(jnp.where(at_last, dep, 0.0), axis=1)
    delivered_marked = jnp.sum(jnp.where(at_last, dep_marked, 0.0), axis=1)
    dropped = arrive * drop_frac_at
    keep = 1.0 - drop_frac_at
    backlog = backlog + arrive * keep
    backlog_marked = backlog_marked + arrive_marked * keep
    lost = jnp.sum(dropped, axis=1)

    # 5. acks (and echoed marks, losses) come back one base RTT later: this step's
    #    feedback fills the ring's current row, and each slot reads the row written
    #    `delay` steps ago, if its flow had started by then (rows left by the slot's
    #    previous flow are never read): O(slots) work a step, not O(ring x slots)
    ring = s.feedback.shape[0]
    delay = jnp.clip(jnp.round(f.base_rtt / dt).astype(jnp.int32), 1, ring - 1)
    cols = jnp.arange(s.slot.shape[0])
    due = s.feedback[(s.step - delay) % ring, cols] * (s.step - s.admitted >= delay)[:, None]
    acked, echoed, lost_fb = due[:, 0], due[:, 1], due[:, 2]
    # the new row depends on the read (+ 0·due): XLA then reads before it writes the ring in
    # place; with no such order between them it copies the whole ring twice a step
    row = jnp.stack([delivered, delivered_marked, lost], axis=-1) + 0.0 * due
    feedback = jax.lax.dynamic_update_slice_in_dim(s.feedback, row[None], s.step % ring, 0)
    cc = transport.UPDATES[kind](s.cc, acked, echoed, lost_fb, dt, f.line_rate)
    cc = transport.cwnd_limited(s.cc, cc, f.line_rate * rtt)

    # 6. completions: every byte delivered. float32 sums can leave a flow a fraction of a
    #    byte short of its size (0.5-byte resolution past 4 MB) with nothing left to send
    #    or queued: that flow is complete too, not stuck forever
    total_delivered = s.delivered + delivered
    to_send = s.to_send - inject + lost
    emptied = (to_send <= 0.5) & (jnp.sum(backlog, axis=1) <= 0.5)
    done = active & ((total_delivered >= f.size - 0.5) | emptied)
    fct = s.fct.at[jnp.where(done, s.slot, params.start.shape[0])].set(
        s.t + dt - f.start + f.base_rtt / 2, mode="drop"
    )

    # 7. per-link counters (the telemetry digest's fields)
    c = s.counters
    pkts = served / MTU_BYTES
    marked_at = markable_at * p_mark
    dropped_at = jnp.minimum(overflow, arrivals)  # every arrival at a link loses drop_frac
    counters = Counters(
        tx_bytes=c.tx_bytes + served,
        marked_bytes=c.marked_bytes + marked_at,
        qdepth_sum=c.qdepth_sum + q_left * pkts,
        qdepth_samples=c.qdepth_samples + pkts,
        qdepth_max=jnp.maximum(c.qdepth_max, jnp.where(served > 0, q_left, 0.0)),
        senders=c.senders,
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
        flow=s.flow,
        seen=s.seen | (dep > 0),
        feedback=feedback,
        fct=fct,
        counters=counters,
        ledger=Ledger(
            injected=s.ledger.injected + jnp.sum(inject),
            delivered=s.ledger.delivered + jnp.sum(delivered),
            dropped=s.ledger.dropped + jnp.sum(lost),
        ),
        queue=q_after - dropped_at,
    )


MIN_PREFIX = 32  # the smallest slot prefix `run` steps; then ×1.5 and ×4/3 in turn
PER_SLOT = (
    "slot", "to_send", "sent", "delivered", "backlog", "backlog_marked", "cc", "admitted", "flow",
    "seen",
)  # fmt: skip
# `run` steps an interval in this many stretches, each on the prefix its own flows need:
# a stretch's bound counts only the flows that start within it
STRETCHES = 8


def prefixes(slots: int) -> tuple[int, ...]:
    """The static slot-prefix sizes `run` may step: 32, 48, 64, 96, 128, ... and all
    `slots` (a prefix wastes at most a third of its slots; each size compiles a loop)."""
    sizes, k = [], MIN_PREFIX
    while 10 * k < 9 * slots:  # not a size within 10 % of all of them
        sizes.append(k)
        k = k * 3 // 2 if k & (k - 1) == 0 else k * 4 // 3  # from a power of two ×1.5
    return (*sizes, slots)


def slots_needed(params: Params, s: NetState, steps: jnp.ndarray | int, dt: float) -> jnp.ndarray:
    """An upper bound of the slots the next `steps` steps touch once the flows in flight are
    moved to the lowest slots (`_compacted`): those flows, plus every flow that starts by
    then (each takes the lowest free slot)."""
    in_flight = jnp.sum(s.slot >= 0)
    t_end = s.t + (steps + 2) * dt  # a margin over t's float32 accumulation
    starting = jnp.searchsorted(params.start, t_end, side="right") - s.next_flow
    return in_flight + starting


def run(
    params: Params,
    s: NetState,
    thresholds: jnp.ndarray,
    dt: float,
    kind: str,
    steps: int,
    record: Callable[[Params, NetState], Any] | None = None,
) -> tuple[NetState, Any]:
    """`steps` steps on the smallest slot prefix that holds them (module docstring): the
    result of scanning `step` over every slot, up to float rounding. Without `record` the
    steps run in `STRETCHES` stretches, each on its own prefix; `record(params, state)`
    after each step gives the scan's stacked output (None: nothing) and runs them in one
    stretch. It takes params as an argument, not from a closure (under vmap a closure over
    batched params would hide them from `_switch_batch_max`'s batching rule)."""
    if record is not None:
        return _stretch(params, s, thresholds, steps, dt=dt, kind=kind, record=record)
    edges = [steps * i // STRETCHES for i in range(STRETCHES + 1)]
    lengths = jnp.asarray([b - a for a, b in itertools.pairwise(edges)], jnp.int32)

    def stretch(n: NetState, length: jnp.ndarray) -> tuple[NetState, None]:
        return _stretch(params, n, thresholds, length, dt=dt, kind=kind, record=None)[0], None

    s, _ = jax.lax.scan(stretch, s, lengths)
    return s, None


def _stretch(params, s, thresholds, steps, dt, kind, record):
    """`steps` steps (static with `record`, else possibly traced) on the smallest prefix."""
    sizes = prefixes(s.slot.shape[0])
    # a recorded stretch's length is static (the scan's), else an operand of every branch
    static = {"steps": steps} if record is not None else {}
    operands = (params, s, thresholds) + (() if static else (steps,))
    branches = tuple(
        functools.partial(_run_prefix, dt=dt, kind=kind, k=k, record=record, **static)
        for k in sizes
    )
    if len(sizes) == 1:
        return branches[0](*operands)
    need = slots_needed(params, s, steps, dt)
    which = jnp.searchsorted(jnp.asarray(sizes[:-1]), need).astype(jnp.int32)
    return _switch_batch_max(branches, which, *operands)


def _compacted(s: NetState, k: int) -> NetState:
    """The first k slots after moving every flow in flight to the lowest slots, in slot
    order (its per-slot state and its feedback ring column with it): a prefix then holds
    the flows in flight however the slots freed since fell. k must hold them all."""
    order = jnp.argsort(s.slot < 0, stable=True)[:k]
    cut = {name: jax.tree.map(lambda x: x[order], getattr(s, name)) for name in PER_SLOT}
    return s._replace(feedback=s.feedback[:, order], **cut)


def _run_prefix(params, s, thresholds, steps, dt, kind, k, record):
    """`steps` steps of the first k slots, compacted (`_compacted`); `record` as in `run`."""
    full = s
    s = _compacted(s, k)

    def one(n: NetState) -> NetState:
        return step(params, n, thresholds, dt, kind)

    if record is None:
        s, out = jax.lax.fori_loop(0, steps, lambda _, n: one(n), s), None
    else:

        def recorded(n: NetState, _: None) -> tuple[NetState, Any]:
            n = one(n)
            return n, record(params, n)

        s, out = jax.lax.scan(recorded, s, None, length=steps)
    s = with_senders(s)
    # the prefix back into the full per-slot arrays; every slot past it is free now
    put = functools.partial(jax.tree.map, lambda old, x: old.at[:k].set(x))
    back = {name: put(getattr(full, name), getattr(s, name)) for name in PER_SLOT}
    back["slot"] = jnp.full_like(full.slot, -1).at[:k].set(s.slot)
    s = s._replace(feedback=full.feedback.at[:, :k].set(s.feedback), **back)
    return s, out


def _switch_batch_max(branches, which, *operands):
    """lax.switch(which, branches, *operands); under vmap the branch of the largest `which`
    in the batch runs for every element (vmap would otherwise run every branch and select
    per element). Valid where a later branch gives every element what its own would: a
    larger slot prefix the same result, admission nothing to an episode with no flow due."""

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
        on = (n.flow.path >= 0) & (n.slot >= 0)[:, None]
        link = jnp.where(on, n.flow.path, 0)
        q = jax.ops.segment_sum(
            jnp.where(on, n.backlog, 0.0).ravel(), link.ravel(), thresholds.shape[0]
        )
        return q, n.counters.tx_bytes

    return run(params, net, thresholds, dt, kind, steps, record)
