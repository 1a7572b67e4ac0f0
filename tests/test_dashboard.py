"""The live page of a run (ecntune.fabric.dashboard): its data follows the files a run
appends, and in a real headless browser (Debian's chromium) the plots update while rows
arrive."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ecntune.fabric.dashboard import ROW_FIELDS, serve_in_background

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def append_intervals(phase: Path, start: int, n: int, ports: int = 3) -> None:
    """n intervals of telemetry for `ports` ports and one mouse FCT per interval."""
    phase.mkdir(parents=True, exist_ok=True)
    with open(phase / "telemetry.jsonl", "a") as f:
        for i in range(start, start + n):
            for port in range(1, ports + 1):
                q = 20_000 * (1 + math.sin(i / 5 + port))
                row = {"t": 1000 + 0.1 * i, "switch": "s1", "port": port,
                       "qdepth_sum_bytes": 50 * q, "qdepth_samples": 50, "tx_bytes": 1e5,
                       "marked_bytes": 1e4 * port, "kmin_bytes": 5000.0 * port,
                       "kmax_bytes": 40_000.0 * port,
                       "mode": "agent" if i >= 5 else "baseline"}  # fmt: skip
                f.write(json.dumps(row) + "\n")
    with open(phase / "h1.fct.jsonl", "a") as f:
        for i in range(start, start + n):
            f.write(json.dumps({"flow_id": str(i), "size": 10_000, "fct": 0.001 * (1 + i)}) + "\n")


def get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, object, Path]]:
    run = tmp_path / "run"
    run.mkdir()
    server = serve_in_background(run, 0)
    yield f"http://127.0.0.1:{server.server_address[1]}", server, run
    server.shutdown()


def test_data_follows_what_the_run_appends_and_waits_for_torn_lines(served):
    base, _, run = served
    assert get(f"{base}/data")["phases"] == {}
    append_intervals(run / "static-secn1", 0, 4)
    d = get(f"{base}/data")
    assert d["fields"] == list(ROW_FIELDS)
    rows = d["phases"]["static-secn1"]["rows"]
    assert len(rows) == 12
    t, port, queue, kmin, kmax, marked, mode = rows[1]
    assert t == pytest.approx(1000.0)
    assert (port, kmin, kmax, mode) == ("s1:2", 10_000.0, 80_000.0, "baseline")
    assert queue == round(20_000 * (1 + math.sin(2)))  # the interval's mean queue
    assert marked == pytest.approx(0.2)
    assert d["phases"]["static-secn1"]["mice_fct_ms"] == [1.0, 2.0, 3.0, 4.0]
    # a line still being written is not served until it ends; junk lines are skipped
    with open(run / "static-secn1" / "telemetry.jsonl", "a") as f:
        f.write('not json\n{"t": 2000, "switch": "s1", "port": 1, "tx_b')
    since = urllib.parse.quote(json.dumps({"static-secn1": 12}))
    assert get(f"{base}/data?since={since}")["phases"]["static-secn1"]["rows"] == []
    with open(run / "static-secn1" / "telemetry.jsonl", "a") as f:
        f.write('ytes": 5}\n')
    new = get(f"{base}/data?since={since}")["phases"]["static-secn1"]
    assert new["from"] == 12
    assert [r[0] for r in new["rows"]] == [2000]
    # phases come in the order they ran (a later phase whose name sorts first comes last)
    append_intervals(run / "acc-default", 100, 2)
    assert list(get(f"{base}/data")["phases"]) == ["static-secn1", "acc-default"]
    for bad in ("/data?since=oops", "/nowhere"):
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(base + bad, timeout=10)
        assert e.value.code in (400, 404)


def wait_for(condition: Callable[[], bool], what: str, timeout_s: float = 90.0) -> None:
    """Poll until `condition()` holds; the page polls every POLL_S, a busy machine may start
    a browser slowly, so the cap is generous and only bounds a broken page."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason="needs chromium (apt-get install chromium)")
def test_the_page_draws_and_updates_in_a_headless_browser(served, tmp_path: Path):
    base, server, run = served
    view = server.view  # type: ignore[attr-defined]
    append_intervals(run / "static-secn1", 0, 30)
    flags = [CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu",
             "--disable-dev-shm-usage"]  # fmt: skip
    browser = subprocess.Popen([*flags, f"--user-data-dir={tmp_path / 'p1'}", f"{base}/"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        wait_for(lambda: view.seen.get("rows") == 90, "the page to draw the first 90 rows")
        assert view.seen["fcts"] == 30
        append_intervals(run / "static-secn1", 30, 10)  # the run goes on ...
        append_intervals(run / "acc-default", 40, 20)  # ... into its next phase
        wait_for(lambda: view.seen.get("rows") == 180, "the page to draw the new rows")
        assert view.seen["fcts"] == 60
        assert view.seen["phases"] == ["static-secn1", "acc-default"]
    finally:
        browser.kill()
        browser.wait()
    shot = tmp_path / "page.png"
    subprocess.run([*flags, f"--user-data-dir={tmp_path / 'p2'}", "--window-size=1200,760",
                    "--virtual-time-budget=5000", f"--screenshot={shot}", f"{base}/"],
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)  # fmt: skip
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
