"""`ecntune dashboard DIR` and `ecntune demo --serve`: a run's live web page, as it happens.

The page shows, per phase of a demo (or any run directory with phase folders): every
port's queue, its ECN thresholds (kmin, kmax) and marked share over time, who decided each
interval (the guard's mode: baseline, agent, fallback) and, over all phases, the CDF of
mice FCTs (< 100 KB) so far. It reads only what the run already writes, appended and
flushed as it happens (report.py: each phase's `telemetry.jsonl`; traffic/records.py: the
receivers' `*.fct.jsonl`), so it serves a running demo, a finished one, or a copy from
another machine alike, and it never slows the run down. Standard library only
(http.server; the page draws on canvases with its own few lines of JavaScript): nothing
to download, works offline.

    GET /                      the page (polls /data every POLL_S)
    GET /data?since={"p": n}   per phase the telemetry rows from index n on (compact
                               lists, ROW_FIELDS), every mice FCT so far, and the phases
    POST /seen                 the page says what it has drawn ({"rows": n, "fcts": m}):
                               how a headless-browser test knows the plots update
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

from ecntune.traffic.fct import MICE_BYTES

POLL_S = 1.0
ROW_FIELDS = ("t", "port", "queue_bytes", "kmin_bytes", "kmax_bytes", "marked", "mode")


def compact(row: dict[str, Any]) -> list[Any]:
    """One telemetry.jsonl row as the page plots it (ROW_FIELDS; port as 'switch:port')."""
    samples = row.get("qdepth_samples") or 0
    tx = row.get("tx_bytes") or 0
    return [
        round(float(row["t"]), 3),
        f"{row['switch']}:{row['port']}",
        round(row.get("qdepth_sum_bytes", 0) / samples) if samples else 0,
        row.get("kmin_bytes", 0),
        row.get("kmax_bytes", 0),
        round(row.get("marked_bytes", 0) / tx, 4) if tx else 0.0,
        row.get("mode", ""),
    ]


@dataclass
class Tail:
    """The complete lines appended to one JSONL file since the last read (a torn last line
    waits for its end; a line that is not JSON is skipped, as report.py skips it)."""

    path: Path
    offset: int = 0

    def new_rows(self) -> list[dict[str, Any]]:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except FileNotFoundError:
            return []
        end = data.rfind(b"\n") + 1
        self.offset += end
        rows = []
        for line in data[:end].splitlines():
            try:
                row = json.loads(line)
            except ValueError:
                continue
            if isinstance(row, dict):
                rows.append(row)
        return rows


@dataclass
class Phase:
    """What the page has of one phase: its telemetry rows and its mice FCTs so far."""

    telemetry: Tail
    rows: list[list[Any]] = field(default_factory=list)
    fct_tails: dict[Path, Tail] = field(default_factory=dict)
    mice_fct_ms: list[float] = field(default_factory=list)

    def refresh(self, folder: Path) -> None:
        self.rows += [compact(r) for r in self.telemetry.new_rows() if _is_telemetry(r)]
        for path in sorted(folder.glob("*.fct.jsonl")):
            tail = self.fct_tails.setdefault(path, Tail(path))
            self.mice_fct_ms += [
                round(1e3 * float(r["fct"]), 3)
                for r in tail.new_rows()
                if "fct" in r and 0 < int(r.get("size", MICE_BYTES)) < MICE_BYTES
            ]


def _is_telemetry(row: dict[str, Any]) -> bool:
    return all(k in row for k in ("t", "switch", "port"))


class RunView:
    """Every phase folder of a run directory (any folder holding telemetry.jsonl or flow
    records), read incrementally; thread-safe (the server answers on several threads)."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = Path(run_dir)
        self.phases: dict[str, Phase] = {}
        self.seen: dict[str, Any] = {}  # what the page last said it drew
        self._lock = threading.Lock()

    def data(self, since: dict[str, int]) -> dict[str, Any]:
        with self._lock:
            for folder in sorted(p for p in self.run_dir.glob("*") if p.is_dir()):
                if (folder / "telemetry.jsonl").exists() or any(folder.glob("*.fct.jsonl")):
                    phase = self.phases.setdefault(
                        folder.name, Phase(Tail(folder / "telemetry.jsonl"))
                    )
                    phase.refresh(folder)
            # in the order they ran (their first interval), so the last is the live one
            ordered = sorted(self.phases.items(), key=lambda kv: _started(kv[1]))
            return {
                "run": str(self.run_dir),
                "fields": ROW_FIELDS,
                "phases": {
                    name: {
                        "from": max(0, since.get(name, 0)),
                        "rows": p.rows[max(0, since.get(name, 0)) :],
                        "mice_fct_ms": p.mice_fct_ms,
                    }
                    for name, p in ordered
                },
            }


def _started(phase: Phase) -> float:
    return phase.rows[0][0] if phase.rows else float("inf")


def make_server(run_dir: Path, port: int = 8080, host: str = "127.0.0.1") -> ThreadingHTTPServer:
    """A server for `run_dir` (not started: call serve_forever, or `serve_in_background`)."""
    view = RunView(run_dir)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            url = urlparse(self.path)
            if url.path == "/":
                self._send(200, PAGE.encode(), "text/html; charset=utf-8")
            elif url.path == "/data":
                try:
                    since = json.loads(parse_qs(url.query).get("since", ["{}"])[0])
                    since = {str(k): int(v) for k, v in dict(since).items()}
                except (ValueError, TypeError):
                    self._send(400, b'{"error": "since must be {\\"phase\\": index}"}')
                    return
                self._send(200, json.dumps(view.data(since)).encode())
            else:
                self._send(404, b'{"error": "not found"}')

        def do_POST(self) -> None:
            if urlparse(self.path).path != "/seen":
                self._send(404, b'{"error": "not found"}')
                return
            length = min(int(self.headers.get("Content-Length", 0)), 65536)
            try:
                view.seen = dict(json.loads(self.rfile.read(length)))
            except (ValueError, TypeError):
                self._send(400, b'{"error": "not JSON"}')
                return
            self._send(204, b"")

        def _send(self, code: int, body: bytes, kind: str = "application/json") -> None:
            self.send_response(code)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:  # quiet: the run's output is the user's
            pass

    server = ThreadingHTTPServer((host, port), Handler)
    server.view = view  # type: ignore[attr-defined]  # for tests and callers
    return server


def serve_in_background(run_dir: Path, port: int, host: str = "127.0.0.1") -> ThreadingHTTPServer:
    """Start the page's server on a daemon thread; `server.shutdown()` stops it."""
    server = make_server(run_dir, port, host)
    threading.Thread(target=server.serve_forever, name="dashboard", daemon=True).start()
    return server


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "dashboard", help="a live web page of a demo run (queues, thresholds, modes, FCTs)"
    )
    p.add_argument("run_dir", type=Path, help="the run's --out directory (its phase folders)")
    p.add_argument("--port", type=int, default=8080)
    p.add_argument("--host", default="127.0.0.1", help="0.0.0.0 serves other machines too")
    p.set_defaults(func=run_dashboard)


def run_dashboard(args: argparse.Namespace) -> int:
    if not args.run_dir.is_dir():
        print(f"error: {args.run_dir} is not a directory", file=sys.stderr)
        return 2
    server = make_server(args.run_dir, args.port, args.host)
    print(f"dashboard: http://{args.host}:{server.server_address[1]}/ (Ctrl-C stops it)")
    with contextlib.suppress(KeyboardInterrupt):
        server.serve_forever()
    return 0


PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>ecntune: live run</title>
<style>
 body { font: 14px system-ui, sans-serif; margin: 16px; color: #222; }
 h1 { font-size: 18px; margin: 0 0 8px; }
 #status { color: #555; margin-bottom: 8px; }
 #legend { color: #555; margin-bottom: 8px; font-size: 13px; }
 .tabs button { margin-right: 4px; padding: 4px 10px; border: 1px solid #999;
   background: #f4f4f4; cursor: pointer; }
 .tabs button.on { background: #335; color: #fff; }
 .grid { display: grid; grid-template-columns: repeat(2, minmax(420px, 1fr)); gap: 12px; }
 figure { margin: 0; } figcaption { font-weight: 600; margin: 6px 0 2px; }
 canvas { width: 100%; height: 220px; border: 1px solid #ddd; }
 .mode-agent { color: #1a7f37; } .mode-fallback { color: #c62828; }
 .mode-baseline { color: #8a6d00; }
</style></head><body>
<h1>ecntune: live run <span id="run"></span></h1>
<div id="status">waiting for data…</div>
<div id="legend">x: seconds into the phase; the strip under each plot: who decided the
 interval (<span class="mode-baseline">baseline</span>, <span class="mode-agent">agent</span>,
 <span class="mode-fallback">fallback</span>)</div>
<div class="tabs" id="tabs"></div>
<div class="grid">
 <figure><figcaption>Queue (KB), the busiest ports</figcaption><canvas id="queue"></canvas></figure>
 <figure><figcaption>ECN thresholds (KB): kmin solid, kmax dashed</figcaption>
  <canvas id="thresholds"></canvas></figure>
 <figure><figcaption>Marked share of bytes sent</figcaption><canvas id="marked"></canvas></figure>
 <figure><figcaption>Mice FCT CDF (ms), every phase so far</figcaption>
  <canvas id="cdf"></canvas></figure>
</div>
<script>
const COLORS = ["#1f77b4","#ff7f0e","#2ca02c","#d62728","#9467bd","#8c564b","#e377c2",
  "#7f7f7f","#bcbd22","#17becf"];
const MODES = {agent: "#1a7f37", baseline: "#e0b000", fallback: "#c62828"};
const phases = {};   // name -> {rows: [...], fct: [...]}
let current = null;

function line(canvas, series, opts) {
  // series: [{label, color, dash, pts: [[x, y], ...]}]; opts: {bands, logx}
  const dpr = window.devicePixelRatio || 1, w = canvas.clientWidth, h = canvas.clientHeight;
  canvas.width = w * dpr; canvas.height = h * dpr;
  const g = canvas.getContext("2d"); g.scale(dpr, dpr); g.clearRect(0, 0, w, h);
  const all = series.flatMap(s => s.pts);
  if (!all.length) { g.fillStyle = "#999"; g.fillText("no data yet", 10, 20); return; }
  const fx = v => opts.logx ? Math.log10(Math.max(v, 1e-3)) : v;
  let x0 = Math.min(...all.map(p => fx(p[0]))), x1 = Math.max(...all.map(p => fx(p[0])));
  let y0 = 0, y1 = Math.max(...all.map(p => p[1]), opts.ymax || 0) * 1.05 || 1;
  if (x1 === x0) x1 = x0 + 1;
  const L = 46, R = 8, T = 8, B = 22;
  const sx = v => L + (fx(v) - x0) / (x1 - x0) * (w - L - R);
  const sy = v => h - B - (v - y0) / (y1 - y0) * (h - T - B);
  for (const b of opts.bands || []) {  // mode of each interval, a strip along the bottom
    g.fillStyle = b.color; g.fillRect(sx(b.x0), h - B - 4, Math.max(1, sx(b.x1) - sx(b.x0)), 4);
  }
  g.strokeStyle = "#ccc"; g.fillStyle = "#555"; g.lineWidth = 1;
  for (let i = 0; i <= 4; i++) {
    const y = y0 + (y1 - y0) * i / 4; g.beginPath(); g.moveTo(L, sy(y)); g.lineTo(w - R, sy(y));
    g.stroke(); g.fillText(y >= 100 ? y.toFixed(0) : y.toPrecision(2), 4, sy(y) + 4);
  }
  for (let i = 0; i <= 4; i++) {
    const xv = x0 + (x1 - x0) * i / 4, lab = opts.logx ? Math.pow(10, xv) : xv;
    g.fillText(lab >= 100 ? lab.toFixed(0) : lab.toPrecision(2), L + (w - L - R) * i / 4 - 8,
      h - 6);
  }
  series.forEach((s, i) => {
    g.strokeStyle = s.color; g.setLineDash(s.dash ? [5, 3] : []); g.lineWidth = 1.5;
    g.beginPath(); s.pts.forEach((p, j) => j ? g.lineTo(sx(p[0]), sy(p[1]))
      : g.moveTo(sx(p[0]), sy(p[1]))); g.stroke();
    g.setLineDash([]); g.fillStyle = s.color;
    if (s.label) g.fillText(s.label, w - R - 90, T + 12 + 12 * (i % 12));
  });
}

function draw() {
  const names = Object.keys(phases);
  if (!names.length) return;
  if (!current || !phases[current]) current = names[names.length - 1];
  document.getElementById("tabs").innerHTML = names.map(n =>
    `<button class="${n === current ? "on" : ""}" onclick="current='${n}'; draw()">${n}</button>`
  ).join("");
  const rows = phases[current].rows;
  const t0 = rows.length ? rows[0][0] : 0;
  const ports = [...new Set(rows.map(r => r[1]))].sort();
  const meanQueue = p => { const q = rows.filter(r => r[1] === p).map(r => r[2]);
    return q.reduce((a, b) => a + b, 0) / Math.max(1, q.length); };
  const shown = [...ports].sort((a, b) => meanQueue(b) - meanQueue(a)).slice(0, SHOWN_PORTS)
    .sort();
  const pick = (col, scale) => shown.map((p, i) => ({label: p, color: COLORS[i % 10],
    pts: rows.filter(r => r[1] === p).map(r => [r[0] - t0, r[col] * scale])}));
  const bands = [];
  const first = rows.filter(r => r[1] === ports[0]);
  first.forEach((r, i) => bands.push({x0: r[0] - t0,
    x1: (first[i + 1] || r)[0] - t0, color: MODES[r[6]] || "#999"}));
  line(document.getElementById("queue"), pick(2, 1e-3), {bands});
  const kmin = pick(3, 1e-3), kmax = pick(4, 1e-3).map(s => ({...s, dash: true, label: ""}));
  line(document.getElementById("thresholds"), kmin.concat(kmax), {bands});
  line(document.getElementById("marked"), pick(5, 1), {bands, ymax: 1});
  const cdfs = names.map((n, i) => {
    const v = [...phases[n].fct].sort((a, b) => a - b);
    return {label: n, color: COLORS[i % 10], pts: v.map((x, j) => [x, (j + 1) / v.length])};
  });
  line(document.getElementById("cdf"), cdfs, {logx: true, ymax: 1});
  const last = rows.length ? rows[rows.length - 1] : null;
  const mode = last ? last[6] : "";
  document.getElementById("status").innerHTML =
    `phase <b>${current}</b>: ${rows.length} port-intervals, ` +
    `${phases[current].fct.length} mice done; mode now ` +
    `<b class="mode-${mode}">${mode || "–"}</b>`;
}

async function poll() {
  try {
    const since = {};
    for (const [n, p] of Object.entries(phases)) since[n] = p.rows.length;
    const r = await fetch("/data?since=" + encodeURIComponent(JSON.stringify(since)));
    const d = await r.json();
    document.getElementById("run").textContent = "(" + d.run + ")";
    for (const [n, p] of Object.entries(d.phases)) {
      const have = phases[n] || (phases[n] = {rows: [], fct: []});
      if (p.from === have.rows.length) have.rows.push(...p.rows);
      have.fct = p.mice_fct_ms;
    }
    draw();
    const drawn = Object.values(phases);
    fetch("/seen", {method: "POST", body: JSON.stringify({
      rows: drawn.reduce((a, p) => a + p.rows.length, 0),
      fcts: drawn.reduce((a, p) => a + p.fct.length, 0), phases: Object.keys(phases)})});
  } catch (e) {
    document.getElementById("status").textContent = "no connection to the run: " + e;
  }
  setTimeout(poll, POLL_MS);
}
const POLL_MS = __POLL_MS__;
const SHOWN_PORTS = 4;
window.addEventListener("resize", draw);
poll();
</script></body></html>
""".replace("__POLL_MS__", str(int(POLL_S * 1000)))
