"""The control loop of one switch, read top to bottom:

    digest -> PortTelemetry (p4src/encoding.py)  -> checked (safety.check_telemetry)
    every interval, for all ports at once:
      history of k intervals -> policy.act (agent/policy.py; features inside the agent)
      -> EcnThresholds -> clamp + rate limit (safety.py) -> register values (encoding.py)
      -> written by the I/O layer (app.py) -> confirmed by the next digests

With `in_switch` the policy is a tree installed in the P4 program (switch_policy.py) and
the switch decides at the end of each interval itself: while the agent is in charge a tick
writes nothing and records the setting the switch reports; the baseline and a fallback
are written as always, and `Decision.in_switch` tells app.py when to install or empty the
tables.

No I/O happens here: app.py feeds digests in and writes what `tick` returns, so this
logic is tested without a switch. A tick is `decide` (what to write) then `settle` (the
interval's reward, the guard's verdict, learning, the log's rows): app.py writes between
the two, so the rest of the interval's bookkeeping does not delay the thresholds.
"""

from __future__ import annotations

import functools
import logging
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import jax
import numpy as np

from ecntune.agent.features import HISTORY, utilisation
from ecntune.agent.policy import LearningPolicy, Policy
from ecntune.agent.rewards import REWARDS, SIMULATOR_REWARDS, Reward
from ecntune.controller.safety import BUSY_UTILIZATION, Guard, check_telemetry, clamp
from ecntune.p4src import encoding as enc
from ecntune.telemetry import PortTelemetry, stacked, unstacked

log = logging.getLogger("ecntune.controller")

CONFIRM_WITHIN = 3  # digests after a write that may still show the old setting


@functools.partial(jax.jit, static_argnums=0)
def _outcome(reward: Reward, now: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Every port's reward for the interval and whether it was busy, from `stacked`
    telemetry as one compiled call (once per port count; op by op this cost more than the
    agent's decision)."""
    t = unstacked(now)
    return reward(t), utilisation(t) >= BUSY_UTILIZATION


@dataclass
class PortState:
    link_bps: float
    arrived: list[PortTelemetry] = field(default_factory=list)
    written: enc.EcnRegisters | None = None
    written_at: float = -1e9
    mismatches: int = 0
    confirmed: bool = False
    rewrites: int = 0  # writes never seen in this port's telemetry, so sent again


@dataclass(frozen=True)
class Decision:
    writes: list[tuple[int, enc.EcnRegisters]]
    rows: list[dict[str, Any]]
    reward: float | None
    in_switch: bool = False  # the switch's own table decides (app.py keeps it installed)


@dataclass(frozen=True)
class Pending:
    """A tick decided but not yet settled (`SwitchLoop.decide`): what to write, and what
    `settle` needs for the interval's reward and rows (each port's telemetry and setting as
    the decision left them: digests arriving during the write may change the port's state)."""

    now: float
    writes: list[tuple[int, enc.EcnRegisters]]
    # what the written ports held before, where the last write set it (not after a rewrite
    # or a switch's own decision): a register write may leave the unchanged registers be
    held: dict[int, enc.EcnRegisters]
    in_switch: bool
    latest: PortTelemetry  # this interval, fields of shape (ports,)
    history: PortTelemetry  # the k intervals the policy saw
    learns: bool  # the agent decided and learns online from this interval
    control: dict[str, Any]  # who decided, the guard's mode and its changes
    # per port: its number, telemetry, setting written and rewrites so far
    ports: list[tuple[int, PortTelemetry, enc.EcnRegisters | None, int]]


def _sum(records: list[PortTelemetry]) -> PortTelemetry:
    """Several digests of one port within one decision interval, as one interval."""
    if len(records) == 1:
        return records[0]
    last = records[-1]
    add = {f: sum(getattr(r, f) for r in records) for f in PortTelemetry._fields}
    return last._replace(
        interval_s=add["interval_s"], tx_bytes=add["tx_bytes"], tx_pkts=add["tx_pkts"],
        marked_bytes=add["marked_bytes"], marked_pkts=add["marked_pkts"],
        qdepth_sum_bytes=add["qdepth_sum_bytes"], qdepth_samples=add["qdepth_samples"],
        qdepth_max_bytes=max(r.qdepth_max_bytes for r in records),
        senders=max(r.senders for r in records), elephant_bytes=add["elephant_bytes"],
    )  # fmt: skip


class SwitchLoop:
    def __init__(
        self,
        switch: str,
        ports: Mapping[int, float],
        policy: Policy,
        fallback: Policy,
        *,
        interval_s: float,
        buffer_bytes: float,
        guard: Guard,
        reward: str | Reward = "acc",
        min_write_interval_s: float = 0.0,
        in_switch: bool = False,
    ) -> None:
        reward = Reward(reward) if isinstance(reward, str) else reward
        if reward.kind not in REWARDS:
            raise ValueError(
                f"reward {reward.kind!r} cannot be computed from telemetry "
                f"(live rewards: {', '.join(REWARDS)}; {', '.join(SIMULATOR_REWARDS)} are the "
                "simulator's alone)"
            )
        self.switch, self.policy, self.fallback = switch, policy, fallback
        self.ports = {p: PortState(bw) for p, bw in sorted(ports.items())}
        self.interval_s, self.buffer_bytes = interval_s, buffer_bytes
        self.guard, self.reward = guard, reward
        trained = getattr(policy, "reward", None)  # an agent's own, as its checkpoint records
        self.judged_by = reward.kind + (  # what the rows say the guard judges by
            f" (trained on {trained.kind})"
            if isinstance(trained, Reward) and trained.kind != reward.kind
            else ""
        )
        self.min_write_interval_s = min_write_interval_s
        self.in_switch, self.switch_decided = in_switch, False
        self.reported_transitions = 0  # guard transitions already written into rows
        self.history: deque[PortTelemetry] = deque(maxlen=HISTORY)  # (ports,) per interval
        self._warm_up()

    # -- telemetry in ----------------------------------------------------------------------

    def on_digest(self, fields: Mapping[str, int]) -> None:
        """One digest as the switch sent it; bogus data benches the agent, never raises."""
        try:
            port = int(fields["port"])
            state = self.ports.get(port)
            port, t = enc.decode_digest(fields, state.link_bps if state else 0.0)
        except (KeyError, ValueError, TypeError) as e:
            self.guard.fall_back(f"{self.switch}: undecodable digest ({e})")
            return
        problem = check_telemetry(t, set(self.ports), port)
        if problem:
            self.guard.fall_back(f"{self.switch}: bogus telemetry: {problem}")
            return
        state.arrived.append(t)
        self._confirm(port, state, t)

    def _confirm(self, port: int, state: PortState, t: PortTelemetry) -> None:
        """Is the last write in force? The digest's decoded setting against the written one."""
        if state.written is None or state.confirmed:
            return
        if (t.kmin_bytes, t.kmax_bytes, t.pmax) == tuple(state.written.thresholds):
            state.confirmed, state.mismatches = True, 0
            return
        state.mismatches += 1
        if state.mismatches > CONFIRM_WITHIN:
            log.error(
                "%s port %d: threshold write not in effect after %d digests; rewriting",
                self.switch, port, state.mismatches,
            )  # fmt: skip
            state.rewrites += 1
            state.written, state.mismatches = None, 0

    # -- one decision for all ports ----------------------------------------------------------

    def tick(self, now: float) -> Decision:
        """One interval's whole decision: `decide`, then `settle` (app.py writes between)."""
        return self.settle(self.decide(now))

    def decide(self, now: float) -> Pending:
        """What to write this interval: history, the policy (or fallback), clamp, register
        values. Only what the write needs, so the thresholds reach the switch sooner
        (issue 20); the interval's reward, the guard's verdict and the rows follow in
        `settle`, while the write is on its way."""
        latest: dict[int, PortTelemetry] = {}
        for port, s in self.ports.items():
            if s.arrived:
                latest[port] = _sum(s.arrived)
                s.arrived = []
            else:
                latest[port] = self._idle(s)
        now_stacked = self._stack(list(latest.values()))
        self.history.append(now_stacked)
        history = self._history()

        use_agent = self.guard.agent_active
        in_switch = self.in_switch and use_agent
        th = None
        if self.switch_decided and not in_switch:  # unknown what the switch set last: write all
            for s in self.ports.values():
                s.written = None
        self.switch_decided = in_switch
        try:
            if not in_switch:
                th = clamp((self.policy if use_agent else self.fallback).act(history),
                           self.buffer_bytes)  # fmt: skip
        except Exception as e:
            self.guard.fall_back(
                f"{self.switch}: {self.policy.name} failed: {type(e).__name__}: {e}"
            )
            use_agent = False
            th = clamp(self.fallback.act(history), self.buffer_bytes)
        # who decided this interval's setting, and the mode changes that led there (a bogus
        # digest may have benched the agent since the last tick): the rows carry both, so
        # reports can say what ran. Changes the reward in `settle` causes show from the next
        # tick.
        name = (self.policy if use_agent else self.fallback).name
        control = {
            "policy": f"{name} (in the switch)" if in_switch else name,
            "mode": self.guard.mode,
            "mode_change": self._new_transitions(),
            "judged_by": self.judged_by,
        }

        writes, held, ports = [], {}, []
        for i, (port, s) in enumerate(self.ports.items()):
            if th is None:  # the switch's own decision, as its telemetry reports it
                t = latest[port]
                s.written = enc.encode_thresholds(t.kmin_bytes, t.kmax_bytes, t.pmax)
                s.confirmed = True
            else:
                regs = enc.encode_thresholds(float(th[0][i]), float(th[1][i]), float(th[2][i]))
                due = now - s.written_at >= self.min_write_interval_s
                if regs != s.written and due:
                    writes.append((port, regs))
                    if s.written is not None:
                        held[port] = s.written
                    s.written, s.written_at, s.confirmed, s.mismatches = regs, now, False, 0
            ports.append((port, latest[port], s.written, s.rewrites))
        learns = use_agent and not in_switch and isinstance(self.policy, LearningPolicy)
        return Pending(now, writes, held, in_switch, now_stacked, history, learns, control, ports)

    def settle(self, pending: Pending) -> Decision:
        """The rest of `decide`'s interval: every port's reward, the guard's record of it
        (which may bench the agent from the next tick), online learning, the log's rows."""
        rewards, busy = (np.asarray(x) for x in _outcome(self.reward, stacked(pending.latest)))
        reward = float(np.mean(rewards[busy])) if busy.any() else None
        self.guard.record(reward)
        if pending.learns:
            try:
                self.policy.observe(pending.history, rewards)
            except Exception as e:
                self.guard.fall_back(f"{self.switch}: {self.policy.name} failed to learn: {e}")
        rows = [
            self._row(pending.now, port, t, written, rewrites, float(r), pending.control)
            for (port, t, written, rewrites), r in zip(pending.ports, rewards, strict=True)
        ]
        return Decision(pending.writes, rows, reward, pending.in_switch)

    def current(self) -> list[tuple[int, enc.EcnRegisters]]:
        """What every port should hold now (re-sent after a switch restart)."""
        return [(p, s.written) for p, s in self.ports.items() if s.written is not None]

    # -- helpers -----------------------------------------------------------------------------

    def _warm_up(self) -> None:
        """Call the policy, the fallback and the reward once before any traffic: each compiles
        on its first call, which for an agent on a busy machine took longer than a short
        demo's whole agent phase and stalled every tick behind it. A policy that fails here
        is benched at once."""
        idle = self._stack([self._idle(s) for s in self.ports.values()])
        history = PortTelemetry(*(np.stack([col] * HISTORY) for col in idle))
        _outcome(self.reward, stacked(idle))  # compiles too
        clamp(self.fallback.act(history), self.buffer_bytes)
        try:
            clamp(self.policy.act(history), self.buffer_bytes)
        except Exception as e:
            self.guard.fall_back(
                f"{self.switch}: {self.policy.name} failed at start: {type(e).__name__}: {e}"
            )

    def _idle(self, s: PortState) -> PortTelemetry:
        """An interval without a digest: the port sent nothing (digests only come with traffic)."""
        w = s.written or enc.EcnRegisters(0, 0, 0, 0)
        zero = 0.0
        return PortTelemetry(
            self.interval_s, s.link_bps, zero, zero, zero, zero, zero, zero, zero,
            *w.thresholds, zero, zero,
        )  # fmt: skip

    def _history(self) -> PortTelemetry:
        """Fields of shape (k, ports), oldest first; a short history repeats its oldest."""
        h = list(self.history)
        h = [h[0]] * (HISTORY - len(h)) + h
        return PortTelemetry(*(np.stack(col) for col in zip(*h, strict=True)))

    @staticmethod
    def _stack(records: list[PortTelemetry]) -> PortTelemetry:
        """One interval of several ports: fields of shape (ports,)."""
        return PortTelemetry(*np.array(records, dtype=np.float64).T)

    def _new_transitions(self) -> str | None:
        """The guard's mode changes not yet written into rows: "fallback: why; ..." or None."""
        new = self.guard.transitions[self.reported_transitions :]
        self.reported_transitions = len(self.guard.transitions)
        return "; ".join(f"{mode}: {why}" for mode, why in new) or None

    def _row(
        self,
        now: float,
        port: int,
        t: PortTelemetry,
        written: enc.EcnRegisters | None,
        rewrites: int,
        reward: float,
        control: dict[str, Any],
    ) -> dict[str, Any]:
        row = {"t": now, "switch": self.switch, "port": port}
        row.update(zip(PortTelemetry._fields, map(float, t), strict=True))
        row.update(
            **control,
            rewrites=rewrites,
            reward=reward,
            set_kmin=written.kmin if written else None,
            set_kmax=written.kmax if written else None,
            set_pmax=written.pmax_bp / enc.PMAX_SCALE if written else None,
        )
        return row
