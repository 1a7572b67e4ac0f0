"""The controller application: finsy switches, each running its SwitchLoop (loop.py).

finsy does the P4Runtime plumbing (arbitration, reconnect with backoff, pipeline push when
the device's cookie differs). Per switch, `SwitchRunner` wires one small piece per concern
around the pure loop: `resume_policy` (the configured policy or this switch's checkpoint),
`program` (forwarding from the topology, telemetry interval, digest subscription),
`DigestReader` and `PacketReader` (the two streams in), `ThresholdWriter` (RegisterEntry
where the target implements it, an OP_SET_ECN PacketOut otherwise, as on BMv2; `write_path:
auto` finds out with the first write) and `Ticker` (one decision per interval, when the
switch's digest list for it arrives; timed, and learning agents checkpointed). Every time a
switch becomes ready — first start, or after it restarted — it is programmed again and
given the thresholds the loop last decided."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import logging
import math
import threading
import time
from collections import deque
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, NamedTuple, TextIO

import finsy as fy
from finsy.p4client import P4ClientError
from finsy.proto import p4r

from ecntune.agent.policy import LearningPolicy, Policy, load_policy
from ecntune.agent.rewards import SIMULATOR_REWARDS, Reward
from ecntune.agent.static import StaticPolicy
from ecntune.controller.config import ConfigError, ControllerConfig
from ecntune.controller.fabric_policy import FabricPolicy
from ecntune.controller.forwarding import forwarding_entities
from ecntune.controller.loop import SwitchLoop
from ecntune.controller.safety import Guard
from ecntune.controller.switch_policy import PolicyEntry, policy_entities, policy_plan
from ecntune.p4runtime_client import bytestring
from ecntune.p4src import PROGRAM
from ecntune.p4src import encoding as enc
from ecntune.targets import SwitchSpec
from ecntune.topology import Topology

log = logging.getLogger("ecntune.controller")
# finsy warns on every connect that the switch has no gNMI; ecntune never uses gNMI.
logging.getLogger("finsy").addFilter(lambda r: "gNMI is not implemented" not in r.getMessage())

UNIMPLEMENTED = 12  # google.rpc.Code


class TelemetryLog:
    """The JSONL stream of per-port telemetry, actions and rewards (read by demo and plots)."""

    def __init__(self, path: Path | None) -> None:
        self.f: TextIO | None = None
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            self.f = open(path, "a")  # noqa: SIM115 - lives as long as the controller

    def write(self, rows: list[dict[str, Any]]) -> None:
        if self.f is not None:
            self.f.writelines(json.dumps(r) + "\n" for r in rows)
            self.f.flush()

    def close(self) -> None:
        if self.f is not None:
            self.f.close()


class TickTiming(NamedTuple):
    """How long one decision interval's work took in the controller (perf_counter seconds):
    what bench/bench_control_loop.py reports, kept for the last TIMINGS_KEPT ticks."""

    decide_s: float  # SwitchLoop.decide: history, decision, clamp, register encoding
    applied_s: float  # from the tick's start until the switch acknowledged its writes
    ports_written: int
    digest_age_s: float  # from the newest digest received to the tick's start
    # a digest list arrived while the tick decided and wrote: its decoding, and the switch
    # sending it, delay the write (bench/bench_control_loop.py reports these ticks apart)
    digest_during: bool
    by_list: bool  # a digest list started the tick (else no list came: Ticker's idle tick)


TIMINGS_KEPT = 10_000
# A tick starts at the first digest list this many intervals after the last tick began:
# one decision per interval, lists coming every half interval, and a little slack so that
# the second list after a tick starts the next one although the lists' timing wanders.
TICK_SPACING_INTERVALS = 0.9
# Without traffic no digest list comes: the ticker decides after twice the switch's list
# period anyway (idle ports get the idle rule's thresholds, the guard keeps counting). The
# period is the interval where the switch honours the digest timeout, longer where it does
# not: PI (BMv2's P4Runtime server) sends a list every 100-200 ms whatever the timeout
# (digest_mgr.cpp: min_max_timeout_ns, and a sample waits two sweeps). Ticking between its
# lists would decide on no telemetry, as if every port were idle.
IDLE_TICK_PERIODS = 2.0
MAX_LIST_PERIOD_INTERVALS = 10  # a pause in the traffic is not the switch's list period


# -- one small piece per concern; SwitchRunner only wires them to one finsy switch ------------


def resume_policy(name: str, config: ControllerConfig) -> Policy:
    """The configured policy, or this switch's own checkpoint from an earlier run."""
    policy = load_policy(config.policy)
    saved = checkpoint_path(config, name)
    if isinstance(config.policy, str) and saved is not None and saved.exists():
        kind = config.policy.partition(":")[0]
        policy = load_policy(f"{kind}:{saved}")
        log.info("%s resumes from its checkpoint %s", name, saved)
    if config.online_learning and hasattr(policy, "online"):
        policy.online = True
    return policy


def switch_policies(config: ControllerConfig) -> dict[str, Policy]:
    """Each switch's policy: its own agent (resumed from its checkpoint), or its share of
    one model for the whole fabric (GraphCC: fabric_policy.py), loaded once."""
    switches = list(config.topology.switches)
    policy = load_policy(config.policy)
    if not hasattr(policy, "for_fabric"):
        return {n: resume_policy(n, config) for n in switches}
    fabric = FabricPolicy(policy, config.topology, config.interval_s)
    log.info("%s decides for all %d switches at once", policy.name, len(switches))
    return {n: fabric.share(n) for n in switches}


def judging_reward(name: str, policy: Policy, config: ControllerConfig) -> Reward:
    """An agent is judged (and its fallback compared) by the reward it was trained with,
    as its checkpoint records; `reward` in the config serves static policies, and agents
    trained on one of the simulator's rewards: no telemetry carries a flow's FCT, so the
    guard judges those by the config's paper reward (the queue and the link, what a broken
    agent ruins at once) and the log says so. Such an agent cannot learn online: it would
    be fine-tuned on an objective it was not trained for."""
    trained = getattr(policy, "reward", None)
    if not isinstance(trained, Reward):
        return Reward(config.reward)
    if trained.kind in SIMULATOR_REWARDS:
        if config.online_learning:
            raise ConfigError(
                f"{policy.name} was trained on the simulator's {trained.kind} reward, which "
                "no telemetry carries: it cannot learn online (set online_learning: false)"
            )
        log.warning(
            "%s: %s was trained on the simulator's %s reward, which no telemetry carries; "
            "the guard judges it by the config's reward, %s, against the fallback",
            name, policy.name, trained.kind, config.reward,
        )  # fmt: skip
        return Reward(config.reward)
    log.info(
        "%s: reward %s with weights %s, as %s was trained (the config's: %s)",
        name, trained.kind, tuple(trained.weights), policy.name, config.reward,
    )  # fmt: skip
    return trained


def make_loop(name: str, config: ControllerConfig, policy: Policy) -> SwitchLoop:
    """The pure control loop (loop.py) for one switch of the topology."""
    topo = config.topology
    # A static setting is what the user asked for: nothing to measure it against.
    baseline = 0 if isinstance(policy, StaticPolicy) else config.baseline_intervals
    return SwitchLoop(
        name, {p: topo.port_bw(name, p) for _, p in topo.ports(name)}, policy,
        load_policy(config.fallback), interval_s=config.interval_s,
        buffer_bytes=config.buffer_bytes, guard=Guard(config.fallback_after, baseline),
        reward=judging_reward(name, policy, config),
        min_write_interval_s=config.min_write_interval_s, in_switch=config.in_switch,
    )  # fmt: skip


class Stream:
    """Everything the controller sends on a switch's P4Runtime stream (PacketOuts, digest
    acks) goes through one lock: finsy's P4Client.send has none, and two tasks writing one
    grpc.aio stream at once fail the call (INTERNAL, too many operations) — the digest
    reader's acks and the ticker's PacketOuts did, within seconds, on the PacketOut write
    path (bench/bench_controller_memory.py found it), and the controller stopped ticking."""

    def __init__(self) -> None:
        self._lock = asyncio.Lock()

    async def send(self, sw: fy.Switch, messages: list[Any]) -> None:
        async with self._lock:
            await sw.write(messages)


async def program(sw: fy.Switch, config: ControllerConfig, stream: Stream) -> None:
    """Forwarding from the topology, the telemetry interval and the digest subscription:
    a digest list every half interval (no sample waits longer for its list), about every
    other one of which starts a tick (`Ticker`)."""
    await sw.delete_all()
    await sw.insert(forwarding_entities(config.topology, sw.name))
    await stream.send(sw, [control(enc.OP_SET_INTERVAL, enc.interval_payload(config.interval_s))])
    await sw.insert(
        [
            fy.P4DigestEntry(
                enc.DIGEST, max_list_size=64, max_timeout_ns=round(config.interval_s / 2 * 1e9),
                ack_timeout_ns=1_000_000_000,
            )
        ]
    )  # fmt: skip


def control(opcode: int, payload: bytes) -> fy.P4PacketOut:
    """A PacketOut the program's control parser takes (threshold or interval settings)."""
    return fy.P4PacketOut(payload, egress_port=0, opcode=opcode, reserved=0)


class DigestReader:
    """Telemetry digests into the loop, each list acknowledged; when the newest arrived."""

    def __init__(self, loop: SwitchLoop, stream: Stream) -> None:
        self.loop, self.stream = loop, stream
        self.last_at = math.nan  # perf_counter of the newest digest list
        self.gap_s = math.nan  # between the newest two lists
        self.lists = 0  # digest lists received
        self.arrived = asyncio.Event()  # a list came since the ticker last looked

    async def run(self, sw: fy.Switch) -> None:
        async for digest_list in sw.read_digests(enc.DIGEST):
            now = time.perf_counter()
            self.gap_s, self.last_at, self.lists = now - self.last_at, now, self.lists + 1
            for sample in digest_list:
                self.loop.on_digest(sample)
            self.arrived.set()
            await self.stream.send(sw, [digest_list.ack()])


class PacketReader:
    """PacketIns drained as they come, so nothing queues up (an unbounded queue of ack times
    once grew here for as long as the controller ran: issue 17); config acks counted."""

    def __init__(self) -> None:
        self.config_acks = 0

    async def run(self, sw: fy.Switch) -> None:
        async for packet in sw.read_packets():
            if packet["reason"] == enc.REASON_CONFIG_ACK:
                self.config_acks += 1


class ThresholdWriter:
    """Thresholds into the data plane: RegisterEntry writes where the target implements
    them, an OP_SET_ECN PacketOut per port otherwise (BMv2); `auto` finds out once."""

    def __init__(self, name: str, path: str, stream: Stream) -> None:
        self.name, self.path, self.stream = name, path, stream

    async def write(
        self,
        sw: fy.Switch,
        writes: list[tuple[int, enc.EcnRegisters]],
        held: Mapping[int, enc.EcnRegisters] | None = None,
    ) -> None:
        """`held`: what some of the ports hold now, so that their registers keeping their
        value are not written again (RegisterEntry only; a PacketOut sets a whole port)."""
        if not writes:
            return
        if self.path in ("auto", "register"):
            try:
                await sw.write(register_updates(sw.p4info, writes, held))
                self.path = "register"
                return
            except P4ClientError as e:
                if self.path == "register" or not _unimplemented(e):
                    raise
                log.info("%s: no RegisterEntry support; thresholds go by PacketOut", self.name)
                self.path = "packet_out"
        await self.stream.send(
            sw, [control(enc.OP_SET_ECN, enc.ecn_config_payload(p, r)) for p, r in writes]
        )


def register_updates(
    schema: fy.P4Schema,
    writes: list[tuple[int, enc.EcnRegisters]],
    held: Mapping[int, enc.EcnRegisters] | None = None,
) -> list[p4r.Update]:
    """MODIFY updates of the threshold registers, built as messages directly: going through
    finsy's P4RegisterEntry cost about three times as much, ~0.9 ms of a 32-port tick's
    128 updates (issue 20). A port in `held` gets only the registers whose value changes
    (a step between two settings of one pmax keeps that register: 96 updates instead of
    128, ~0.2 ms less per 32-port write)."""
    registers: dict[str, tuple[int, int]] = {}  # name -> (id, bitwidth): looked up once
    updates = []
    held = held or {}
    for port, regs in writes:
        before = held[port].as_dict() if port in held else {}
        for name, value in regs.as_dict().items():
            if before.get(name) == value:
                continue
            if name not in registers:
                spec = schema.registers[name]
                registers[name] = spec.id, spec.type_spec.bitwidth
            register_id, bitwidth = registers[name]
            update = p4r.Update(type=p4r.Update.MODIFY)
            entry = update.entity.register_entry
            entry.register_id, entry.index.index = register_id, port
            entry.data.bitstring = bytestring(value, bitwidth)
            updates.append(update)
    return updates


class SwitchTable:
    """The in-switch policy's tables (switch_policy.py): installed while the loop lets the
    agent decide, emptied before a fallback's thresholds are written."""

    def __init__(self, name: str, plan: list[PolicyEntry]) -> None:
        self.name, self.plan, self.installed = name, plan, False

    async def follow(self, sw: fy.Switch, wanted: bool) -> None:
        if wanted == self.installed or not self.plan:
            return
        entities = policy_entities(self.plan)
        if wanted:
            await sw.insert(entities)  # port classes first, then the tree
        else:
            await sw.delete(entities[::-1])  # the tree first: no port keys into half a tree
        self.installed = wanted
        log.info("%s: in-switch policy %s (%d entries)", self.name,
                 "installed" if wanted else "removed", len(self.plan))  # fmt: skip


class Ticker:
    """One decision per interval: tick the loop, write what changed, log the rows, time it,
    save a learning agent every `checkpoint_every` intervals.

    A tick starts when a digest list arrives: `program` has the switch send a list every
    half interval, and the first one TICK_SPACING_INTERVALS after the last tick began
    (about every other one) starts the next tick, so the decision comes right after
    telemetry arrived and the next list is half an interval away while the tick decides
    and writes. With a clock of its own the ticker met lists at every phase (the switch
    closes each port's interval on that port's packets; lists went a millisecond after
    that), and a list's sending and decoding in the middle of a tick made the write's tail
    (issue 20). How long a port's sample waits for a decision is as before: up to half an
    interval in the switch, and up to half an interval more in the controller if its list
    started no tick, where it waited up to one interval for the tick's clock. Without
    traffic there are no digests, and the ticker ticks after IDLE_TICK_PERIODS list
    periods without a list."""

    def __init__(
        self, runner: SwitchRunner, checkpoint: Path | None, checkpoint_every: int = 100
    ) -> None:
        self.runner, self.checkpoint, self.checkpoint_every = runner, checkpoint, checkpoint_every
        self.timings: deque[TickTiming] = deque(maxlen=TIMINGS_KEPT)

    async def run(self, sw: fy.Switch) -> None:
        r = self.runner
        start = time.perf_counter()
        while True:
            by_list = await self._next_interval(start)
            start, digest_at, lists = time.perf_counter(), r.digests.last_at, r.digests.lists
            pending = r.loop.decide(time.time())
            decided = time.perf_counter()
            await r.table.follow(sw, pending.in_switch)
            await r.writer.write(sw, pending.writes, pending.held)
            self.timings.append(
                TickTiming(
                    decided - start, time.perf_counter() - start, len(pending.writes),
                    start - digest_at, r.digests.lists > lists, by_list,
                )
            )  # fmt: skip
            r.log.write(r.loop.settle(pending).rows)  # reward, guard, rows: after the write
            self._save()

    async def _next_interval(self, last: float) -> bool:
        """Until the first digest list TICK_SPACING_INTERVALS after the last tick began
        (`last`, perf_counter, the clock of DigestReader's times), or IDLE_TICK_PERIODS
        list periods after it without one (one arriving sooner leaves its samples for this
        one); whether a list ended the wait."""
        interval, digests = self.runner.config.interval_s, self.runner.digests
        gap_s = min(digests.gap_s, MAX_LIST_PERIOD_INTERVALS * interval)  # min(nan, x) is nan
        period = max(interval, gap_s) if math.isfinite(gap_s) else interval
        idle_at = last + IDLE_TICK_PERIODS * period
        while True:
            try:
                await asyncio.wait_for(digests.arrived.wait(), idle_at - time.perf_counter())
            except TimeoutError:
                return False
            digests.arrived.clear()
            if time.perf_counter() >= last + TICK_SPACING_INTERVALS * interval:
                return True

    def _save(self) -> None:
        """Learning agents are saved (atomically, by their save) every `checkpoint_every`."""
        policy = self.runner.policy
        due = self.runner.loop.guard.intervals % self.checkpoint_every == 0
        if self.checkpoint and due and isinstance(policy, LearningPolicy):
            policy.save(self.checkpoint)


class SwitchRunner:
    """One switch: its finsy connection and, once it is ready, one piece per concern
    around the pure loop (as finsy's own examples start one small manager per concern)."""

    def __init__(
        self, name: str, config: ControllerConfig, log_: TelemetryLog, policy: Policy
    ) -> None:
        self.name, self.config, self.log = name, config, log_
        self.policy = policy
        self.loop = make_loop(name, config, self.policy)
        self.stream = Stream()
        self.writer = ThresholdWriter(name, config.write_path, self.stream)
        ports = {p: config.topology.port_bw(name, p) for _, p in config.topology.ports(name)}
        plan = policy_plan(policy, ports, config.buffer_bytes) if config.in_switch else []
        self.table = SwitchTable(name, plan)
        self.digests, self.packets = DigestReader(self.loop, self.stream), PacketReader()
        self.ticker = Ticker(self, checkpoint_path(config, name))
        self.ready = asyncio.Event()
        self.switch = fy.Switch(
            name,
            config.address(name),
            fy.SwitchOptions(
                p4info=PROGRAM.p4info_path,
                p4blob=PROGRAM.json_path,
                device_id=config.topology.switches[name].device_id,
                initial_election_id=config.election_id,
                ready_handler=self._ready,
            ),
        )

    @property
    def write_path(self) -> str:
        return self.writer.path

    @property
    def timings(self) -> deque[TickTiming]:
        return self.ticker.timings

    async def _ready(self, sw: fy.Switch) -> None:
        """Every time the switch becomes ready (first start, or after it restarted)."""
        sw.create_task(self.digests.run(sw), name=f"{self.name}-digests")
        sw.create_task(self.packets.run(sw), name=f"{self.name}-packets")
        await program(sw, self.config, self.stream)
        self.table.installed = False  # program() emptied every table; the next tick refills
        if not self.loop.current():  # first start: decide before any traffic is seen
            self.log.write(self.loop.tick(time.time()).rows)
        await self.writer.write(sw, self.loop.current())
        sw.create_task(self.ticker.run(sw), name=f"{self.name}-tick")
        self.ready.set()
        log.info("%s ready (forwarding installed, %s)", self.name, self.policy.name)


def checkpoint_path(config: ControllerConfig, switch: str) -> Path | None:
    if config.checkpoint_dir is None:
        return None
    return config.checkpoint_dir / f"{switch}.msgpack"


def _unimplemented(e: P4ClientError) -> bool:
    codes = {d.canonical_code for d in e.details.values()} | {e.code.value}
    return UNIMPLEMENTED in codes or "not supported" in str(e).lower()


class Controller:
    def __init__(self, config: ControllerConfig) -> None:
        self.config = config
        self.log = TelemetryLog(config.telemetry_log)
        self.runners = {
            n: SwitchRunner(n, config, self.log, p) for n, p in switch_policies(config).items()
        }

    async def run(self, started: threading.Event | None = None) -> None:
        controller = fy.Controller([r.switch for r in self.runners.values()])
        async with controller:
            await asyncio.gather(*(r.ready.wait() for r in self.runners.values()))
            # what start-up built (imports, compiled policies) stays for good: out of the
            # collector's sight, its full collections no longer stall a tick (65-86 ms at
            # worst, 5-6 ms frozen, in 3 000 32-port ticks; issue 20)
            gc.collect()
            gc.freeze()
            if started is not None:
                started.set()
            await asyncio.Event().wait()  # until cancelled

    def close(self) -> None:
        self.log.close()


def quiet_grpc_poller(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """An event loop's exception handler that drops one known false alarm: grpc.aio's
    poller is shared by every event loop of a process (grpc/grpc#25364), and may still
    hand an event of an earlier controller's finished call to that controller's loop after
    it closed ("Event loop is closed"; the demo runs one controller per phase). Everything
    else is reported as asyncio would."""
    error = context.get("exception")
    if "PollerCompletionQueue" in repr(context.get("handle")) and (
        isinstance(error, BlockingIOError)
        or (isinstance(error, RuntimeError) and "Event loop is closed" in str(error))
    ):
        log.debug("grpc.aio poller: %s (an earlier event loop's call; ignored)", error)
        return
    loop.default_exception_handler(context)


@contextlib.contextmanager
def run_in_background(config: ControllerConfig, timeout_s: float = 60.0) -> Iterator[Controller]:
    """Run a controller in its own thread and event loop while the block runs."""
    controller = Controller(config)
    started = threading.Event()
    loop = asyncio.new_event_loop()
    loop.set_exception_handler(quiet_grpc_poller)
    task: asyncio.Task | None = None
    failure: list[BaseException] = []

    def main() -> None:
        nonlocal task
        asyncio.set_event_loop(loop)
        task = loop.create_task(controller.run(started))
        try:
            loop.run_until_complete(task)
        except asyncio.CancelledError:
            pass
        except BaseException as e:
            failure.append(e)
            started.set()
        finally:
            loop.close()

    thread = threading.Thread(target=main, name="controller", daemon=True)
    thread.start()
    try:
        if not started.wait(timeout_s) or failure:
            raise RuntimeError(
                f"controller did not get ready: {failure[0] if failure else 'timeout'}"
            )
        yield controller
    finally:
        if task is not None and not loop.is_closed():
            loop.call_soon_threadsafe(task.cancel)
        thread.join(timeout=10)
        controller.close()


def control_plane(
    topology: Topology,
    specs: dict[str, SwitchSpec],
    policy: str | Policy,
    telemetry_log: Path | None,
    **settings: Any,
) -> contextlib.AbstractContextManager[Controller]:
    """The demo's hook: a controller for a running fabric, with one policy, logging telemetry.

    `settings` are further ControllerConfig fields (interval_s, write_path, ...).
    """
    switches = {name: spec.grpc_addr for name, spec in specs.items()}
    config = ControllerConfig(
        topology=topology,
        policy=policy,
        switches=switches,
        telemetry_log=telemetry_log,
        **settings,
    )
    return run_in_background(config)
