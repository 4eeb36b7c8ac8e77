#!/usr/bin/env python3
"""`watch` measured on a replayed day (issue #24 item 3): detection latency per class,
what only the night caught, false alarms, and what a cycle costs beside a nightly.

One run, side by side:

1. `gen --out DAY --orders N --incident --live mysql://.../watch_live --speed S` writes a
   generated day into MariaDB in event-time order, S times faster than it happened (the
   rows before the day at once), and prints its replay clock.
2. `watch --every 5m` runs on that clock (EFFECT_RECON_CLOCK), so its cycles are 5 event
   minutes apart (5/S wall seconds), posting to a local webhook; it runs until the event
   clock passes the day's cut plus the longest grace, then gets SIGTERM.
3. `nightly --cut <day cut>` runs over the same database (a full export: the book of
   record), `verify` checks it against the generator's truth, and a second full nightly
   in a separate root gives the rows a night reads for the cost comparison.

Latency of a finding = the cut of the cycle that first listed it as a BREAK (its
`first_seen_run` in the night's outputs) minus its `first_break_on`, in event time and in
scaled wall time (÷ S). A finding the night lists NEW was missed by every cycle. A finding
a cycle reported that the night neither lists open nor resolves, or resolves for a reason
that was already true when the cycle reported it, is a false alarm.

Usage: python3 benches/watch_live.py [--orders 20000] [--speed 240] [--seed 11]
Needs MariaDB on 127.0.0.1:3306 (root, no password), the release binary
($CARGO_TARGET_DIR/release/effect-recon or EFFECT_RECON_BIN) and duckdb (benches/.venv).
"""
from __future__ import annotations

import argparse
import http.server
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

BENCHES = Path(__file__).resolve().parent
REPO = BENCHES.parent
TARGET = Path(os.environ.get("CARGO_TARGET_DIR", Path.home() / ".cache/effect-recon/target"))
BIN = Path(os.environ.get("EFFECT_RECON_BIN", TARGET / "release/effect-recon"))
DB = "watch_live"


def ensure_duckdb():
    try:
        import duckdb  # noqa: F401
    except ImportError:
        venv = BENCHES / ".venv" / "bin" / "python"
        if not venv.exists():
            subprocess.run([sys.executable, "-m", "venv", str(BENCHES / ".venv")], check=True)
            subprocess.run([str(venv), "-m", "pip", "install", "-q", "duckdb"], check=True)
        os.execv(str(venv), [str(venv), __file__, *sys.argv[1:]])


class Hook(http.server.BaseHTTPRequestHandler):
    messages: list = []

    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        Hook.messages.append((time.time(), json.loads(body)))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args):
        pass


def sh(*args, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in args], check=True, capture_output=True, text=True, **kw)


def job_file(work: Path, root: Path) -> Path:
    text = (REPO / "fixtures/demo/job.toml").read_text()
    text = text.replace('root     = "recon"', f'root     = "{root}"')
    text = text.replace('url   = "sqlite:fulfilment.db"', f'url   = "mysql://root@127.0.0.1:3306/{DB}"')
    text += '\n[incremental]\nmargin = "2s"\n'
    path = work / f"job-{root.name}.toml"
    path.write_text(text)
    return path


def rows_read(stderr: str) -> int:
    m = re.search(r"export done: (\d+) rows", stderr)
    return int(m[1]) if m else -1


def main() -> int:
    ensure_duckdb()
    import duckdb

    p = argparse.ArgumentParser()
    p.add_argument("--orders", type=int, default=20000)
    p.add_argument("--speed", type=float, default=240)
    p.add_argument("--seed", type=int, default=11)
    p.add_argument("--every", default="5m")
    p.add_argument("--work", type=Path, default=Path("/tmp/effect-recon-watch-live"))
    args = p.parse_args()
    work = args.work
    subprocess.run(["rm", "-rf", str(work)], check=True)
    work.mkdir(parents=True)
    sh("mariadb", "-h127.0.0.1", "-uroot", "-e", f"DROP DATABASE IF EXISTS {DB}; CREATE DATABASE {DB}")

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hook)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    webhook = f"http://127.0.0.1:{server.server_port}/hook"

    day = work / "day"
    clock_file = work / "clock"
    gen = subprocess.Popen([str(BIN), "gen", "--out", str(day), "--orders", str(args.orders), "--seed", str(args.seed),
                            "--incident", "--live", f"mysql://root@127.0.0.1:3306/{DB}", "--speed", str(args.speed),
                            "--clock-file", str(clock_file)], stdout=subprocess.PIPE, text=True)
    while not clock_file.exists():
        if gen.poll() is not None:
            raise SystemExit(f"gen --live ended early: {gen.stdout.read()}")
        time.sleep(0.05)
    clock = clock_file.read_text().strip()
    origin_text, rest = clock.split("@")
    wall_origin, speed = int(rest.split("x")[0]) / 1e6, float(rest.split("x")[1])
    print(f"replay clock {clock}")

    intraday_root = work / "recon"
    job = job_file(work, intraday_root)
    env = dict(os.environ, EFFECT_RECON_CLOCK=clock)
    watch = subprocess.Popen([str(BIN), "watch", "--config", str(job), "--every", args.every, "--alert-webhook", webhook,
                              "--compact-every", "0"], env=env, stderr=subprocess.PIPE, text=True)
    lines: list[tuple[float, str]] = []
    threading.Thread(target=lambda: [lines.append((time.time(), l.rstrip())) for l in watch.stderr], daemon=True).start()
    gen_out, _ = gen.communicate()
    print(gen_out.strip().splitlines()[-1])
    manifest = json.loads((day / "manifest.json").read_text())
    cut = manifest["cut"]
    # Two more event hours: every grace (30m) ends, and the cycles after the cut are seen.
    import datetime as dt
    cut_dt = dt.datetime.fromisoformat(cut.replace("Z", "+00:00"))
    origin_dt = dt.datetime.fromisoformat(origin_text.replace("Z", "+00:00"))
    stop_wall = wall_origin + ((cut_dt - origin_dt).total_seconds() + 2 * 3600) / speed
    time.sleep(max(0.0, stop_wall - time.time()))
    watch.send_signal(signal.SIGTERM)
    watch.wait(timeout=300)
    time.sleep(0.5)
    cycles = [l for _, l in lines if l.startswith("watch: cycle ")]
    print(f"watch: {len(cycles)} cycles; exit {watch.returncode}; last: {lines[-1][1] if lines else ''}")

    # The night over the same database, at the day's cut (its full export reads the lookback).
    night = subprocess.run([str(BIN), "nightly", "--config", str(job), "--cut", cut, "-q"], capture_output=True, text=True)
    assert night.returncode in (0, 3), night.stderr
    night_run = intraday_root / f"run={cut.replace('-', '').replace(':', '')}"
    verify = subprocess.run([str(BIN), "verify", "--truth", str(day / "truth.parquet"), "--run", str(night_run)],
                            capture_output=True, text=True)
    print("verify:", verify.stdout.strip().splitlines()[-1] if verify.stdout.strip() else verify.stderr.strip())

    con = duckdb.connect()
    con.execute(f"CREATE VIEW night AS SELECT * FROM read_parquet('{night_run}/discrepancies/*.parquet')")
    con.execute(f"CREATE VIEW resolved AS SELECT * FROM read_parquet('{night_run}/resolved/*.parquet')")
    runs = sorted(p for p in (intraday_root / "intraday").glob("run=*") if (p / "manifest.json").exists())
    con.execute("CREATE TABLE cycles (run_id VARCHAR, cut TIMESTAMPTZ, new BIGINT, inputs BIGINT, reconcile_ms BIGINT)")
    for run in runs:
        s = json.loads((run / "summary.json").read_text())
        con.execute("INSERT INTO cycles VALUES (?, ?, ?, ?, ?)",
                    [s["run_id"], s["cut"], s["new"], sum(v for k, v in s["inputs"].items() if "/" not in k),
                     s["timings_ms"].get("reconcile", 0)])
    files = ",".join(f"'{r}/discrepancies/*.parquet'" for r in runs)
    con.execute(f"CREATE VIEW intraday AS SELECT * FROM read_parquet([{files}], filename = true)")
    latency = con.execute(f"""
        SELECT n.class, count(*) AS n,
               quantile_cont(epoch(c.cut) - epoch(n.first_break_on), 0.5) AS p50,
               quantile_cont(epoch(c.cut) - epoch(n.first_break_on), 0.99) AS p99,
               max(epoch(c.cut) - epoch(n.first_break_on)) AS worst
        FROM night n JOIN cycles c ON c.run_id = n.first_seen_run
        WHERE n.verdict = 'BREAK' GROUP BY n.class ORDER BY n.class""").fetchall()
    # NEW at night: no cycle up to the night's cut reported it. A cycle after the cut may
    # have (its break_on came within one interval of the cut); the rest no cycle saw.
    missed = con.execute(f"""
        SELECT n.class,
               count(*) FILTER (WHERE n.finding_id IN (SELECT i.finding_id FROM intraday i JOIN cycles c
                   ON i.filename LIKE '%run=' || c.run_id || '/%' WHERE c.cut > TIMESTAMPTZ '{cut}' AND i.verdict = 'BREAK')) AS after_cut,
               count(*) AS night_only
        FROM night n WHERE n.verdict = 'BREAK' AND n.lifecycle = 'NEW'
        GROUP BY n.class ORDER BY n.class""").fetchall()
    reported = con.execute("""SELECT count(DISTINCT finding_id) FROM intraday WHERE verdict = 'BREAK' AND lifecycle = 'NEW'""").fetchone()[0]
    vanished = con.execute("""
        SELECT count(*) FROM (SELECT DISTINCT finding_id FROM intraday WHERE verdict = 'BREAK' AND lifecycle = 'NEW') i
        WHERE i.finding_id NOT IN (SELECT finding_id FROM night WHERE verdict = 'BREAK')
          AND i.finding_id NOT IN (SELECT finding_id FROM resolved)""").fetchone()[0]
    resolutions = con.execute("""SELECT resolution, count(*) FROM resolved GROUP BY 1 ORDER BY 1""").fetchall()
    cost = con.execute("SELECT count(*), median(reconcile_ms), max(reconcile_ms) FROM cycles").fetchone()

    # Rows read: each cycle's export line, and a full night in its own root.
    exported = [int(m[1]) for _, l in lines if (m := re.search(r"export incremental, (\d+) rows", l))]
    full_job = job_file(work, work / "full")
    full = subprocess.run([str(BIN), "nightly", "--config", str(full_job), "--cut", cut, "--full"], capture_output=True, text=True)
    full_rows = rows_read(full.stderr)

    every_s = 300 / speed
    print(f"\nspeed x{speed:g}: --every {args.every} = {every_s:.2f} s wall; cycles {cost[0]}, reconcile median {cost[1]} ms, max {cost[2]} ms")
    print("| class | found by a cycle | p50 | p99 | max | (event minutes; scaled wall seconds in brackets) |")
    for cls, n, p50, p99, worst in latency:
        f = lambda s: f"{s / 60:.1f} min ({s / speed:.2f} s)"
        print(f"| {cls} | {n} | {f(p50)} | {f(p99)} | {f(worst)} |")
    print("NEW at night (class, of which a cycle after the night's cut reported, all): " + (str(missed) if missed else "none"))
    print(f"reported by cycles: {reported}; neither open nor resolved at night (false alarms): {vanished}")
    print(f"night's resolved table: {resolutions}")
    if exported:
        print(f"rows read per incremental cycle: median {statistics.median(exported):.0f}, max {max(exported)}; "
              f"full nightly: {full_rows} (median cycle / full = 1/{full_rows / max(1, statistics.median(exported)):.0f})")
    print(f"webhook messages: {len(Hook.messages)} ({sum(1 for _, m in Hook.messages if m.get('new'))} with NEW findings)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
