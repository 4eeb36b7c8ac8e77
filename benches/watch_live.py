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

    root = work / "recon"
    job = job_file(work, root)
    # The previous day's night, over what the preload wrote: the book of record the first
    # cycle follows (as a watch started beside a running nightly does).
    night0 = subprocess.run([str(BIN), "nightly", "--config", str(job), "--cut", origin_text, "-q"],
                            capture_output=True, text=True)
    assert night0.returncode in (0, 3), night0.stderr
    env = dict(os.environ, EFFECT_RECON_CLOCK=clock)
    watch = subprocess.Popen([str(BIN), "watch", "--config", str(job), "--every", args.every, "--alert-webhook", webhook],
                             env=env, stderr=subprocess.PIPE, text=True)
    lines: list[tuple[float, str]] = []
    threading.Thread(target=lambda: [lines.append((time.time(), l.rstrip())) for l in watch.stderr], daemon=True).start()
    gen_out, _ = gen.communicate()
    cpu_before = os.times()  # gen is reaped: only watch's CPU is counted from here
    print(gen_out.strip().splitlines()[-1])
    manifest = json.loads((day / "manifest.json").read_text())
    cut = manifest["cut"]
    # Two more event hours: every grace (30m) after the cut ends, and those cycles are seen.
    import datetime as dt
    cut_dt = dt.datetime.fromisoformat(cut.replace("Z", "+00:00"))
    origin_dt = dt.datetime.fromisoformat(origin_text.replace("Z", "+00:00"))
    stop_wall = wall_origin + ((cut_dt - origin_dt).total_seconds() + 2 * 3600) / speed
    time.sleep(max(0.0, stop_wall - time.time()))
    watch.send_signal(signal.SIGTERM)
    watch.wait(timeout=300)
    time.sleep(0.2)
    (work / "watch.log").write_text("\n".join(l for _, l in lines) + "\n")
    cpu_after = os.times()
    time.sleep(0.5)
    cycles = [l for _, l in lines if l.startswith("watch: cycle ")]
    print(f"watch: {len(cycles)} cycles; exit {watch.returncode}; last: {lines[-1][1] if lines else ''}")

    # The night at the day's cut beside the intraday chain (it follows night0), and a lone
    # full night in its own root: the reference, checked against the generator's truth.
    night = subprocess.run([str(BIN), "nightly", "--config", str(job), "--cut", cut, "-q"], capture_output=True, text=True)
    assert night.returncode in (0, 3), night.stderr
    run_id = cut.replace("-", "").replace(":", "")
    night_run = root / f"run={run_id}"
    lone_job = job_file(work, work / "lone")
    lone = subprocess.run([str(BIN), "nightly", "--config", str(lone_job), "--cut", cut, "--full"], capture_output=True, text=True)
    assert lone.returncode in (0, 3), lone.stderr
    lone_run = work / "lone" / f"run={run_id}"
    verify = subprocess.run([str(BIN), "verify", "--truth", str(day / "truth.parquet"), "--run", str(lone_run)],
                            capture_output=True, text=True)
    verdict = (verify.stdout.strip().splitlines() or [verify.stderr.strip()])[-1]
    print("verify (lone night):", verdict)

    con = duckdb.connect()
    con.execute(f"CREATE VIEW ref AS SELECT * FROM read_parquet('{lone_run}/discrepancies/*.parquet')")
    con.execute(f"CREATE VIEW night AS SELECT * FROM read_parquet('{night_run}/discrepancies/*.parquet')")
    runs = sorted(p for p in (root / "intraday").glob("run=*") if (p / "manifest.json").exists())
    con.execute("CREATE TABLE cycles (run_id VARCHAR, cut TIMESTAMPTZ, new BIGINT, ms BIGINT)")
    for run in runs:
        s = json.loads((run / "summary.json").read_text())
        con.execute("INSERT INTO cycles VALUES (?, ?, ?, ?)",
                    [s["run_id"], s["cut"], s["new"], sum(s["timings_ms"].values())])
    files = lambda table: ",".join(f"'{r}/{table}/*.parquet'" for r in runs)
    con.execute(f"""CREATE VIEW seen AS SELECT c.run_id, c.cut, d.* FROM read_parquet([{files('discrepancies')}], filename = true) d
                    JOIN cycles c ON d.filename LIKE '%/run=' || c.run_id || '/%'""")
    con.execute(f"""CREATE VIEW later AS SELECT r.* FROM read_parquet([{files('resolved')}]) r""")
    # The first BREAK of every finding a cycle listed NEW (not those carried from night0).
    con.execute("""CREATE TABLE first AS SELECT finding_id, min(cut) AS cut FROM seen WHERE verdict = 'BREAK'
                    AND finding_id IN (SELECT finding_id FROM seen WHERE lifecycle = 'NEW') GROUP BY 1""")
    con.execute(f"CREATE VIEW receipts AS SELECT * FROM read_parquet('{day}/receipts/**/*.parquet')")
    latency = con.execute("""
        SELECT r.class, count(*) AS n,
               quantile_cont(epoch(f.cut) - epoch(r.break_on), 0.5), quantile_cont(epoch(f.cut) - epoch(r.break_on), 0.99),
               max(epoch(f.cut) - epoch(r.break_on))
        FROM ref r JOIN first f USING (finding_id) WHERE r.verdict = 'BREAK' GROUP BY 1 ORDER BY 1""").fetchall()
    missed = con.execute("""SELECT r.class, r.effect, r.order_id FROM ref r WHERE r.verdict = 'BREAK'
                            AND r.finding_id NOT IN (SELECT finding_id FROM first) ORDER BY 1, 3""").fetchall()
    extra = con.execute(f"""
        SELECT CASE WHEN f.finding_id IN (SELECT finding_id FROM ref WHERE verdict = 'PENDING') THEN 'PENDING at the cut, BREAK after it'
                    WHEN f.cut > TIMESTAMPTZ '{cut}' THEN 'first BREAK after the cut'
                    WHEN f.finding_id IN (SELECT l.finding_id FROM later l JOIN receipts r USING (receipt_id)
                                          WHERE l.resolution = 'RECEIPT' AND r.created_at > f.cut)
                         THEN 'resolved later in the day: RECEIPT created after the report'
                    WHEN f.finding_id IN (SELECT finding_id FROM later WHERE resolution <> 'RECEIPT')
                         THEN 'resolved later in the day: ' ||
                              (SELECT min(resolution) FROM later l WHERE l.finding_id = f.finding_id)
                    ELSE 'unexplained (false alarm)' END AS why, count(*)
        FROM first f WHERE f.finding_id NOT IN (SELECT finding_id FROM ref WHERE verdict = 'BREAK')
        GROUP BY 1 ORDER BY 1""").fetchall()
    night_new = json.loads((night_run / "summary.json").read_text())["new"]
    cost = con.execute("SELECT count(*), median(ms), quantile_cont(ms, 0.99), max(ms) FROM cycles").fetchone()

    # Rows read: each incremental cycle's export line beside the lone full night's.
    exported = [int(m[1]) for _, l in lines if (m := re.search(r"export incremental, (\d+) rows", l))]
    full_rows = rows_read(lone.stderr)
    cpu = (cpu_after.children_user + cpu_after.children_system) - (cpu_before.children_user + cpu_before.children_system)

    every_s = 300 / speed
    print(f"\n{args.orders} orders, speed x{speed:g}: --every {args.every} = {every_s:.2f} s wall; {cost[0]} cycles; "
          f"cycle wall time median {cost[1]:.0f} ms, p99 {cost[2]:.0f} ms, max {cost[3]:.0f} ms")
    print("| class | found by a cycle | p50 | p99 | max |  (event minutes; scaled wall seconds in brackets)")
    print("|---|---:|---:|---:|---:|")
    for cls, n, p50, p99, worst in latency:
        f = lambda x: f"{x / 60:.1f} min ({x / speed:.2f} s)"
        print(f"| {cls} | {n} | {f(p50)} | {f(p99)} | {f(worst)} |")
    print(f"BREAK in the reference night that no cycle reported: {len(missed)} {missed[:10]}")
    print(f"reported by a cycle, not BREAK in the reference night: {extra or 'none'}")
    print(f"the night beside the chain: NEW {night_new} (what no cycle had reported)")
    if exported:
        print(f"rows read per incremental cycle: median {statistics.median(exported):.0f}, max {max(exported)}; "
              f"lone full night: {full_rows} (median cycle = 1/{full_rows / max(1, statistics.median(exported)):.0f} of a night)")
    print(f"CPU seconds of watch over the day (user+sys): {cpu:.1f} s for {cost[0]} cycles = {cpu / max(1, cost[0]):.2f} s per cycle")
    print(f"webhook messages: {len(Hook.messages)} ({sum(1 for _, m in Hook.messages if m.get('new'))} with NEW findings)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
