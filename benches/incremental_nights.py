#!/usr/bin/env python3
"""Incremental nights against full nightlies, side by side, on one MariaDB changed in place.

A generated day (`effect-recon gen --orders N`) is loaded into a fresh database and copied
back PREFILL-1 days (shifted event times, new ids), so the database holds a full lookback
whose rows were last changed when they were written (`updated_at` = event time). Then, for
each measured night n = 1..NIGHTS, the day's changes are applied to the tables *in place*:

* a new day: the generated day copied n days forward (new msg_ids, order ids, receipt ids);
* SKIPPED ledger rows turned REVOKED, PENDING_REVIEW rows decided DONE, receipts REVERSED,
  in older days (UPDATE ... WHERE, so `updated_at` moves);
* late rows: ledger rows inserted with event times three days back;

and two nightlies run over the same state: `nightly` on the incremental root (it follows
its previous snapshot) and `nightly --full` on another root; then `run --judge-all` over the
full export's snapshot into a third root (every order judged, as before issue 23's item 4). Per night it records the rows
read from the database, the export, run and nightly wall times, the peak RSS and the bytes
written, and checks that the three runs' outputs are byte-identical (every Parquet output,
`summary.json` without `timings_ms`). Exit 0 when every night matched; the table goes to
stdout (paste it into benches/RESULTS.md) and, with --results, into that file.

Usage:
  python3 benches/incremental_nights.py --orders 20000 --prefill 30 --nights 5
Environment: EFFECT_RECON_BIN (default: $CARGO_TARGET_DIR/release/effect-recon), BENCH_DB
(default er_incremental), BENCH_HOST/BENCH_PORT/BENCH_USER (127.0.0.1, 3306, root).
"""

import argparse
import datetime
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

TABLES = {
    "idempotent_msg": "decided_at",
    "order_status_history": "changed_at",
    "points_receipt": "created_at",
    "wms_receipt": "created_at",
    "logistics_receipt": "created_at",
}
LEDGER_COLS = "order_id, event_type, expected_status, action, observed_status, topic, kafka_partition, kafka_offset, consumer_id"
RECEIPT_COLS = "effect, status"


def sh(cmd, **kw):
    return subprocess.run(cmd, check=True, text=True, capture_output=True, **kw)


class Maria:
    def __init__(self, db):
        self.db = db
        self.base = ["mariadb", f"--host={os.environ.get('BENCH_HOST', '127.0.0.1')}",
                     f"--port={os.environ.get('BENCH_PORT', '3306')}",
                     f"--user={os.environ.get('BENCH_USER', 'root')}"]

    def run(self, sql, db=True):
        args = self.base + ([self.db] if db else []) + ["-N", "-e", sql]
        return sh(args).stdout

    def url(self):
        host = os.environ.get("BENCH_HOST", "127.0.0.1")
        port = os.environ.get("BENCH_PORT", "3306")
        user = os.environ.get("BENCH_USER", "root")
        return f"mysql://{user}@{host}:{port}/{self.db}"


def copy_day(m, shift_days, tag, order_offset):
    """The loaded day (rows whose ids carry no '~'), copied `shift_days` days (negative:
    back) with new ids; `updated_at` = the copy's event time for prefill, NOW for a new day."""
    stamp = lambda col: f"{col} + INTERVAL {shift_days} DAY"
    updated = lambda col: stamp(col) if shift_days < 0 else "NOW(6)"
    m.run(
        f"INSERT INTO idempotent_msg (msg_id, {LEDGER_COLS}, decided_at, updated_at) "
        f"SELECT CONCAT(msg_id, '~{tag}'), order_id + {order_offset}, event_type, expected_status, action, "
        f"observed_status, topic, kafka_partition, kafka_offset, consumer_id, {stamp('decided_at')}, {updated('decided_at')} "
        f"FROM idempotent_msg WHERE msg_id NOT LIKE '%~%'")
    m.run(
        f"INSERT INTO order_status_history (order_id, status, changed_at, updated_at) "
        f"SELECT order_id + {order_offset}, status, {stamp('changed_at')}, {updated('changed_at')} "
        f"FROM order_status_history WHERE order_id < 10000000")
    for table in ("points_receipt", "wms_receipt", "logistics_receipt"):
        m.run(
            f"INSERT INTO {table} (receipt_id, order_id, effect, msg_id, status, created_at, updated_at) "
            f"SELECT CONCAT(receipt_id, '~{tag}'), order_id + {order_offset}, effect, "
            f"IF(msg_id IS NULL, NULL, CONCAT(msg_id, '~{tag}')), status, {stamp('created_at')}, {updated('created_at')} "
            f"FROM {table} WHERE receipt_id NOT LIKE '%~%'")


def changes(m, n):
    """Night n's in-place changes to older days, and late rows."""
    m.run(f"UPDATE idempotent_msg SET action = 'REVOKED' WHERE action = 'SKIPPED' AND MOD(order_id, 7) = {n % 7}")
    m.run(f"UPDATE idempotent_msg SET action = 'DONE' WHERE action = 'PENDING_REVIEW' AND MOD(order_id, 5) = {n % 5}")
    m.run(f"UPDATE points_receipt SET status = 'REVERSED' WHERE status = 'SUCCEEDED' AND MOD(order_id, 997) = {n}")
    m.run(
        f"INSERT INTO idempotent_msg (msg_id, {LEDGER_COLS}, decided_at) "
        f"SELECT CONCAT(msg_id, '~late{n}'), {LEDGER_COLS}, decided_at + INTERVAL {n - 3} DAY "
        f"FROM idempotent_msg WHERE msg_id NOT LIKE '%~%' AND MOD(order_id, 211) = 0")


def timed(cmd, env=None):
    out = tempfile.NamedTemporaryFile(delete=False)
    out.close()
    started = time.monotonic()
    proc = subprocess.run(["/usr/bin/time", "-f", "%e %M", "-o", out.name] + cmd, text=True,
                          capture_output=True, env=env)
    wall = time.monotonic() - started
    rss_kib = Path(out.name).read_text().split()[-1]
    os.unlink(out.name)
    return proc, wall, int(rss_kib) / 1024


def seconds(text, pattern):
    m = re.search(pattern, text, re.M)
    if not m:
        return None
    value, unit = m.group(1), m.group(2)
    value = float(value.replace(",", ""))
    return value / 1000 if unit == "ms" else value


def outputs(run_folder):
    files = {}
    for path in sorted(Path(run_folder).rglob("*")):
        rel = str(path.relative_to(run_folder))
        if path.suffix == ".parquet":
            files[rel] = path.read_bytes()
        elif rel == "summary.json":
            summary = json.loads(path.read_text())
            summary.pop("timings_ms", None)
            files[rel] = json.dumps(summary, sort_keys=True).encode()
    return files


def du(path):
    return sum(p.stat().st_size for p in Path(path).rglob("*") if p.is_file())


def job(work, url, root, margin):
    text = (REPO / "fixtures/demo/job.toml").read_text()
    text = text.replace('root     = "recon"', f'root     = "{root}"')
    text = text.replace('url   = "sqlite:fulfilment.db"', f'url   = "{url}"')
    text += f'\n[incremental]\nverify_full_every = 0\nmargin = "{margin}"\n'
    path = work / f"{Path(root).name}.toml"
    path.write_text(text)
    return path


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--orders", type=int, default=20000, help="orders per day")
    ap.add_argument("--prefill", type=int, default=30, help="days in the database before night 1")
    ap.add_argument("--nights", type=int, default=5, help="measured nights")
    ap.add_argument("--margin", default="1s",
                    help="the watermark margin; the nights of this bench are seconds apart in real time, so "
                         "the default 5m would re-read every earlier night's changes (the open-transaction term "
                         "of the probe keeps 1s safe)")
    ap.add_argument("--results", help="also append the table to this file")
    ap.add_argument("--keep", action="store_true",
                    help="keep the work folder (snapshots, runs, job configs) for profiling")
    args = ap.parse_args()
    target = os.environ.get("CARGO_TARGET_DIR", str(Path.home() / ".cache/effect-recon/target"))
    binary = os.environ.get("EFFECT_RECON_BIN", f"{target}/release/effect-recon")
    m = Maria(os.environ.get("BENCH_DB", "er_incremental"))
    work = Path(tempfile.mkdtemp(prefix="er-incremental-"))
    try:
        sh([binary, "gen", "--orders", str(args.orders), "--out", str(work / "day")])
        m.run(f"DROP DATABASE IF EXISTS {m.db}; CREATE DATABASE {m.db}", db=False)
        sh([binary, "load", "--snapshot", str(work / "day"), "--url", m.url()])
        for table, event in TABLES.items():
            m.run(f"UPDATE {table} SET updated_at = {event}")
        for d in range(1, args.prefill):
            copy_day(m, -d, f"p{d}", d * 10_000_000)
        rows = sum(int(m.run(f"SELECT COUNT(*) FROM {t}")) for t in TABLES)
        print(f"database: {args.prefill} days of {args.orders} orders, {rows} rows", file=sys.stderr)
        incr_job = job(work, m.url(), work / "incr", args.margin)
        full_job = job(work, m.url(), work / "full", args.margin)
        lines = []
        for n in range(0, args.nights + 1):
            start = datetime.datetime(2026, 11, 29, 16, tzinfo=datetime.timezone.utc)
            cut = (start + datetime.timedelta(days=n)).strftime("%Y-%m-%dT%H:%M:%SZ")
            if n > 0:
                copy_day(m, n, f"n{n}", (100 + n) * 10_000_000)
                changes(m, n)
            measured = {}
            for name, job_path, extra in (("incremental", incr_job, []), ("full", full_job, ["--full"])):
                proc, wall, rss = timed([binary, "nightly", "--config", str(job_path), "--cut", cut] + extra)
                if proc.returncode not in (0, 1):
                    sys.exit(f"night {n} {name}: exit {proc.returncode}\n{proc.stderr}")
                err = proc.stderr
                read = int(re.search(r"export done: (\d+) rows", err).group(1))
                export_s = seconds(err, r"export done: .* in ([\d.,]+)(ms|s)$")
                run_s = seconds(err, r"run done: .* in ([\d.,]+)(ms|s)$")
                folder = re.search(r"outputs: (\S+)", proc.stdout).group(1)
                snap = Path(str(job_path.parent / Path(job_path).stem)) / f"snapshot={cut.replace('-', '').replace(':', '')}"
                measured[name] = dict(read=read, export=export_s, run=run_s, wall=wall, rss=rss, err=err,
                                      bytes=du(snap), outputs=outputs(folder), line=next(
                                          (l for l in err.splitlines() if "export: " in l and ("incremental" in l or "full export" in l)), ""))
            # The full export's snapshot run once more judging every order (item 4's
            # baseline): the same outputs, and what judging only the changeable orders saves.
            full_snap = Path(str(full_job.parent / full_job.stem)) / f"snapshot={cut.replace('-', '').replace(':', '')}"
            proc, wall, _ = timed([binary, "run", "--snapshot", str(full_snap), "--out", str(work / "all"),
                                   "--judge-all"])
            if proc.returncode not in (0, 1):
                sys.exit(f"night {n} run --judge-all: exit {proc.returncode}\n{proc.stderr}")
            folder = re.search(r"outputs: (\S+)", proc.stdout)
            folder = folder.group(1) if folder else str(sorted((work / "all").glob("run=*"))[-1])
            measured["all"] = dict(wall=wall, outputs=outputs(folder))
            judged = re.search(r"run: judged ([\d,]+) orders \(([\d,]+) rows\)", measured["incremental"]["err"])
            measured["incremental"]["judged"] = judged.group(1) if judged else "all"
            same = (measured["incremental"]["outputs"] == measured["full"]["outputs"]
                    == measured["all"]["outputs"])
            i, f = measured["incremental"], measured["full"]
            i["all_run"] = measured["all"]["wall"]
            lines.append((n, cut, i, f, same))
            print(f"night {n} {cut}: rows {i['read']} vs {f['read']}, nightly {i['wall']:.2f}s vs {f['wall']:.2f}s, "
                  f"outputs {'identical' if same else 'DIFFER'}; {i['line'].strip()}", file=sys.stderr)
            if not same:
                sys.exit(f"night {n}: the incremental and the full nightly's outputs differ")
        table = ["| night | cut | rows read incr / full | export s incr / full | run s incr / full / judge-all (process wall) | orders judged (incr) | nightly s incr / full | peak RSS MiB incr / full | bytes written incr / full | outputs |",
                 "|---|---|---|---|---|---|---|---|---|---|"]
        for n, cut, i, f, same in lines:
            table.append(
                f"| {n} | {cut} | {i['read']:,} / {f['read']:,} ({i['read'] / f['read']:.3f}) | "
                f"{i['export']:.2f} / {f['export']:.2f} | {i['run']:.2f} / {f['run']:.2f} / {i['all_run']:.2f} | {i['judged']} | "
                f"{i['wall']:.2f} / {f['wall']:.2f} ({i['wall'] / f['wall']:.2f}) | {i['rss']:.0f} / {f['rss']:.0f} | "
                f"{i['bytes'] / 1e6:.1f} MB / {f['bytes'] / 1e6:.1f} MB | {'identical' if same else 'differ'} |")
        measured_nights = lines[1:]
        if measured_nights:
            rr = sum(i["read"] for _, _, i, _, _ in measured_nights) / sum(f["read"] for _, _, _, f, _ in measured_nights)
            wr = sum(i["wall"] for _, _, i, _, _ in measured_nights) / sum(f["wall"] for _, _, _, f, _ in measured_nights)
            table.append("")
            table.append(f"Nights 1–{args.nights} together: rows read {rr:.3f}× the full export's, nightly wall time {wr:.2f}×.")
        text = "\n".join(table) + "\n"
        print(text)
        if args.results:
            with open(args.results, "a") as out:
                out.write(text)
    finally:
        if args.keep:
            print(f"kept: {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
