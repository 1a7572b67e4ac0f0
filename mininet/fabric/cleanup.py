"""Every fabric run is tagged, so that whatever ends it, nothing it started outlives it.

A run gets a four-hex-digit id (`rid`) and leaves exactly two kinds of traces:
- processes: Mininet's host shells, switch processes, traffic tools and the reaper all
  inherit `ECNTUNE_RUN=<rid>` in their environment (it is set before anything starts);
- interfaces in the root namespace: switch-side veth ends and bridges, all named `ec<rid>…`.
Hosts live in Mininet's anonymous network namespaces, which disappear with their last
process and take the host ends of their veths (and so the peers) with them. Killing the
tagged processes and deleting the `ec<rid>` links therefore removes a run completely.

`/run/ecntune/<rid>.json` names the run's owner (pid and kernel start time, which guards
against pid reuse). A run is an orphan once its owner is gone. The owner cleans up on normal
exit, Ctrl-C, SIGTERM and exceptions; a reaper process, started with the run in a session of
its own, cleans up if the owner dies without doing so (SIGKILL, OOM killer); `ecntune cleanup`
removes every orphan, and with `--mininet` also runs Mininet's own (machine-wide) cleanup.

This module imports nothing heavy: the reaper and the CLI must start fast.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import re
import secrets
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)

ENV_VAR = "ECNTUNE_RUN"
RUN_DIR = Path(os.environ.get("ECNTUNE_RUN_DIR", "/run/ecntune"))
LINK_PREFIX = "ec"
IFNAMSIZ = 15  # longest interface name Linux accepts
_RID = re.compile(r"^[0-9a-f]{4}$")
_LINK = re.compile(rf"^{LINK_PREFIX}([0-9a-f]{{4}})")


def process_start_time(pid: int) -> int | None:
    """Kernel start time of `pid` in clock ticks (field 22 of /proc/pid/stat), None if gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()  # comm (field 2) may hold spaces and ')'
    return int(fields[19]) if fields[0] != "Z" else None


@dataclass(frozen=True)
class Run:
    rid: str
    owner_pid: int
    owner_start: int

    @property
    def link_prefix(self) -> str:
        return f"{LINK_PREFIX}{self.rid}"

    def ifname(self, suffix: str) -> str:
        """A root-namespace interface name that `clean` will find again."""
        name = self.link_prefix + suffix
        if len(name) > IFNAMSIZ:
            raise ValueError(f"interface name {name!r} is longer than {IFNAMSIZ} characters")
        return name

    def owner_alive(self) -> bool:
        return process_start_time(self.owner_pid) == self.owner_start

    @property
    def state_file(self) -> Path:
        return RUN_DIR / f"{self.rid}.json"


def begin_run() -> Run:
    """Register a new run owned by this process (its id is unique among registered runs)."""
    RUN_DIR.mkdir(parents=True, exist_ok=True)
    pid = os.getpid()
    start = process_start_time(pid)
    assert start is not None
    while True:
        run = Run(secrets.token_hex(2), pid, start)
        try:
            with open(run.state_file, "x") as f:
                json.dump(asdict(run), f)
        except FileExistsError:
            continue
        return run


def registered_runs() -> dict[str, Run | None]:
    """Every run with a state file; None where the file is unreadable (treated as an orphan)."""
    out: dict[str, Run | None] = {}
    for path in RUN_DIR.glob("*.json") if RUN_DIR.is_dir() else ():
        try:
            out[path.stem] = Run(**json.loads(path.read_text()))
        except (OSError, ValueError, TypeError):
            out[path.stem] = None
    return out


def tagged_processes() -> dict[int, str]:
    """pid -> rid for every live process carrying ECNTUNE_RUN (zombies have no environment)."""
    key = ENV_VAR.encode() + b"="
    out = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            env = (entry / "environ").read_bytes()
        except OSError:
            continue
        for var in env.split(b"\0"):
            if var.startswith(key):
                rid = var[len(key) :].decode(errors="replace")
                if _RID.match(rid):
                    out[int(entry.name)] = rid
                break
    return out


def run_links() -> dict[str, str]:
    """ifname -> rid for every root-namespace interface a run created."""
    out = subprocess.run(["ip", "-j", "link", "show"], capture_output=True, text=True, check=True)
    names = [link["ifname"] for link in json.loads(out.stdout or "[]")]
    return {n: m.group(1) for n in names if (m := _LINK.match(n))}


@dataclass
class Leftovers:
    """What belonged to a set of runs; after `clean`, what was removed."""

    processes: dict[int, str] = field(default_factory=dict)
    links: dict[str, str] = field(default_factory=dict)
    state_files: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.processes or self.links or self.state_files)


def leftovers(rids: Iterable[str] | None = None) -> Leftovers:
    """Processes, links and state files of the given runs (of every run when None)."""
    wanted = None if rids is None else set(rids)
    me = os.getpid()
    procs = {p: r for p, r in tagged_processes().items() if p != me}
    return Leftovers(
        processes={p: r for p, r in procs.items() if wanted is None or r in wanted},
        links={n: r for n, r in run_links().items() if wanted is None or r in wanted},
        state_files=[r for r in registered_runs() if wanted is None or r in wanted],
    )


def orphan_rids() -> set[str]:
    """Runs whose owner is gone, found from processes, links and state files alike."""
    runs = registered_runs()
    seen = set(runs) | set(tagged_processes().values()) | set(run_links().values())
    return {rid for rid in seen if (run := runs.get(rid)) is None or not run.owner_alive()}


def _kill(pids: Iterable[int], grace_s: float) -> None:
    """SIGTERM, then SIGKILL whatever is still there after `grace_s` (bash ignores SIGTERM)."""
    pids = set(pids)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + grace_s
        while pids and time.monotonic() < deadline:
            pids = {p for p in pids if process_start_time(p) is not None}
            time.sleep(0.05)
        if not pids:
            return


def clean(rids: Iterable[str], grace_s: float = 1.0) -> Leftovers:
    """Remove every process, link and state file of the given runs; return what was removed."""
    found = leftovers(rids)
    _kill(found.processes, grace_s)
    for name in found.links:
        # deleting one end of a veth deletes its peer, which may be listed too
        subprocess.run(["ip", "link", "del", name], capture_output=True)
    for rid in found.state_files:
        (RUN_DIR / f"{rid}.json").unlink(missing_ok=True)
    return found


# -- the reaper ------------------------------------------------------------------------------


def start_reaper(run: Run) -> subprocess.Popen:
    """Watch the owner from outside its process group, so Ctrl-C does not reach the reaper."""
    return subprocess.Popen(
        [sys.executable, "-m", "ecntune.fabric.cleanup", "--reap", run.rid],
        start_new_session=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def reap(rid: str) -> None:
    """Block until the owner of `rid` exits, then remove whatever of the run is left."""
    run = registered_runs().get(rid)
    if run is not None and run.owner_alive():
        try:
            fd = os.pidfd_open(run.owner_pid)
        except ProcessLookupError:
            fd = None
        if fd is not None and run.owner_alive():  # the pid was still the owner when opened
            select.select([fd], [], [])
            os.close(fd)
    clean([rid])


# -- `ecntune cleanup` -------------------------------------------------------------------------


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "cleanup", help="remove processes and links left behind by ecntune runs that are gone"
    )
    p.add_argument("--all", action="store_true", help="also stop runs whose owner is still alive")
    p.add_argument(
        "--mininet",
        action="store_true",
        help="also run Mininet's own cleanup (mn -c); it removes EVERY Mininet network on "
        "this machine, not only ecntune's",
    )
    p.add_argument("--dry-run", action="store_true", help="list what would be removed")
    p.set_defaults(func=run_cleanup)


def run_cleanup(args: argparse.Namespace) -> int:
    if os.geteuid() != 0 and not args.dry_run:
        print("ecntune cleanup needs root (it kills processes and deletes links)", file=sys.stderr)
        return 1
    rids = _all_rids() if args.all else orphan_rids()
    found = leftovers(rids) if args.dry_run else clean(rids)
    verb = "would remove" if args.dry_run else "removed"
    print(
        f"{verb}: {len(found.processes)} processes, {len(found.links)} links, "
        f"{len(found.state_files)} run records"
    )
    for pid, rid in sorted(found.processes.items()):
        print(f"  process {pid} (run {rid})")
    for name in sorted(found.links):
        print(f"  link {name}")
    if args.mininet and not args.dry_run:
        from mininet.clean import cleanup as mininet_cleanup

        mininet_cleanup()
    return 0


def _all_rids() -> set[str]:
    return set(registered_runs()) | set(tagged_processes().values()) | set(run_links().values())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="the reaper of one ecntune run")
    p.add_argument("--reap", required=True, metavar="RID")
    args = p.parse_args(argv)
    if not _RID.match(args.reap):
        p.error(f"not a run id: {args.reap!r}")
    reap(args.reap)
    return 0


if __name__ == "__main__":
    sys.exit(main())
