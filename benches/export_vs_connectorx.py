#!/usr/bin/env python3
"""effect-recon export against ConnectorX on the same database, side by side (issue #27 item 3).

One loaded day (the recommended schema of sql/schema/, e.g. `effect-recon gen` then
`effect-recon load`) is read by:

* `effect-recon export` with one connection: the five contract queries of
  fixtures/demo/job.toml, one REPEATABLE READ snapshot, rows sorted by order_id, zstd
  Parquet (the product's defaults, its COUNT(*) check included);
* ConnectorX `read_sql(..., return_type="arrow")` on the same five queries, without
  partitions and with `partition_on="order_id"` at each --partitions count: to Arrow alone,
  and to Arrow plus pyarrow sorting by order_id and writing zstd Parquet (the same output).

Each variant runs in its own process under GNU time (wall seconds, peak RSS), alternating,
--reps times; the median of each is printed with every sample, and the row counts of every
table must agree. ConnectorX needs `pip install connectorx==0.4.6 pyarrow` in the Python
given with --python (default: this one).

    python3 benches/export_vs_connectorx.py --snapshot /tmp/cx/day \\
        --mysql-url mysql://root@127.0.0.1:3306/er_cx --pg-url postgres://postgres@127.0.0.1:5432/er_cx \\
        --python ~/.cache/effect-recon/cx-venv/bin/python --reps 3
"""

import argparse
import datetime as dt
import json
import os
import statistics
import subprocess
import sys
import tempfile

TABLES = {
    # name: (table of the contract, SELECT ... FROM ..., time column)
    "ledger": (
        "ledger",
        "SELECT msg_id, order_id, event_type, expected_status, action, observed_status, topic, "
        "kafka_partition, kafka_offset, consumer_id, decided_at FROM idempotent_msg",
        "decided_at",
    ),
    "status_history": (
        "status_history",
        "SELECT order_id, status, changed_at FROM order_status_history",
        "changed_at",
    ),
    "points": ("receipts", "SELECT receipt_id, order_id, effect, msg_id, status, created_at FROM points_receipt", "created_at"),
    "wms": ("receipts", "SELECT receipt_id, order_id, effect, msg_id, status, created_at FROM wms_receipt", "created_at"),
    "logistics": (
        "receipts",
        "SELECT receipt_id, order_id, effect, msg_id, status, created_at FROM logistics_receipt",
        "created_at",
    ),
}

# The ConnectorX reader, run in its own process: argv = url, parquet dir or "-", partitions,
# then one JSON list of [name, query]. Prints {name: rows} as JSON.
CX_READER = r"""
import json, sys, connectorx as cx
url, out, partitions, queries = sys.argv[1], sys.argv[2], int(sys.argv[3]), json.loads(sys.argv[4])
rows = {}
for name, query in queries:
    if partitions > 1:
        table = cx.read_sql(url, query, return_type="arrow", partition_on="order_id", partition_num=partitions)
    else:
        table = cx.read_sql(url, query, return_type="arrow")
    rows[name] = table.num_rows
    if out != "-":
        import pyarrow.parquet as pq
        table = table.sort_by("order_id")
        pq.write_table(table, f"{out}/{name}.parquet", compression="zstd")
print(json.dumps(rows))
"""


def timed(argv, env=None):
    """Runs argv under GNU time; returns (seconds, peak RSS MiB, stdout)."""
    with tempfile.NamedTemporaryFile(mode="r") as report:
        done = subprocess.run(
            ["/usr/bin/time", "-f", "%e %M", "-o", report.name, *argv],
            capture_output=True,
            text=True,
            env=env,
        )
        if done.returncode not in (0, 1):
            sys.exit(f"error: {' '.join(argv[:3])} exited {done.returncode}: {done.stderr[-2000:]}")
        seconds, kib = report.read().split()[-2:]
    return float(seconds), int(kib) / 1024, done.stdout


def bounds(snapshot):
    manifest = json.load(open(os.path.join(snapshot, "manifest.json")))
    cut = dt.datetime.fromisoformat(manifest["cut"].replace("Z", "+00:00"))
    lower = cut - dt.timedelta(days=31)
    return cut, lower


def job_config(url, root, mysql):
    lower, cut = ("?", "?") if mysql else ("$1", "$2")
    out = f'root = "{root}"\nlookback = "30d"\n[export]\nconnections = 1\n'
    for name, (table, select, column) in TABLES.items():
        query = f"{select} WHERE {column} > {lower} AND {column} <= {cut}"
        out += f'\n[[source]]\ntable = "{table}"\nname = "{name}"\nurl = "{url}"\nquery = """\n{query}\n"""\n'
    return out


def cx_queries(mysql, lower, cut):
    fmt = (lambda t: t.strftime("'%Y-%m-%d %H:%M:%S.%f'")) if mysql else (
        lambda t: t.strftime("'%Y-%m-%d %H:%M:%S.%f+00'")
    )
    return [
        [name, f"{select} WHERE {column} > {fmt(lower)} AND {column} <= {fmt(cut)}"]
        for name, (_, select, column) in TABLES.items()
    ]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--snapshot", required=True, help="the loaded day's snapshot (for its cut)")
    parser.add_argument("--mysql-url")
    parser.add_argument("--pg-url")
    parser.add_argument("--bin", default=os.path.expanduser("~/.cache/effect-recon/target/release/effect-recon"))
    parser.add_argument("--bin-before", help="another build's binary, timed beside --bin (a change measured before and after)")
    parser.add_argument("--python", default=sys.executable, help="a Python with connectorx and pyarrow")
    parser.add_argument("--partitions", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    cut, lower = bounds(args.snapshot)
    work = tempfile.mkdtemp(prefix="export-vs-cx-")
    for label, url in (("MariaDB", args.mysql_url), ("PostgreSQL", args.pg_url)):
        if not url:
            continue
        mysql = url.startswith("mysql")
        job = os.path.join(work, f"{label}.toml")
        open(job, "w").write(job_config(url, os.path.join(work, "root"), mysql))
        queries = json.dumps(cx_queries(mysql, lower, cut))
        variants = {"effect-recon export, 1 connection (sorted zstd Parquet)": args.bin}
        if args.bin_before:
            variants["effect-recon export, the build before (--bin-before)"] = args.bin_before
        for n in args.partitions:
            variants[f"ConnectorX, {n} partition(s), to Arrow"] = (n, False)
            variants[f"ConnectorX, {n} partition(s), + pyarrow sorted zstd Parquet"] = (n, True)
        samples = {name: [] for name in variants}
        rows = {}
        for rep in range(args.reps):
            for name, variant in variants.items():
                out = os.path.join(work, f"out-{rep}-{len(samples[name])}-{abs(hash(name))}")
                os.makedirs(out)
                if isinstance(variant, str):
                    argv = [variant, "export", "--config", job, "--out", out, "--cut", cut.isoformat(), "-q"]
                    seconds, mib, _ = timed(argv)
                    manifest = json.load(open(os.path.join(out, "manifest.json")))
                    counted = manifest_rows(manifest)
                else:
                    n, parquet = variant
                    argv = [args.python, "-c", CX_READER, url, out if parquet else "-", str(n), queries]
                    seconds, mib, stdout = timed(argv)
                    counted = json.loads(stdout.strip().splitlines()[-1])
                samples[name].append((seconds, mib))
                rows.setdefault(name, counted)
                subprocess.run(["rm", "-rf", out])
        reference = rows[next(iter(variants))]
        for name, counted in rows.items():
            if counted != reference:
                sys.exit(f"error: {label}: {name} read {counted}, effect-recon {reference}")
        total = sum(reference.values())
        print(f"\n{label}: {total:,} rows ({', '.join(f'{k} {v:,}' for k, v in reference.items())}), cut {cut.isoformat()}, {args.reps} reps")
        base = statistics.median(s for s, _ in samples[next(iter(variants))])
        for name, values in samples.items():
            wall = statistics.median(s for s, _ in values)
            rss = max(m for _, m in values)
            every = " ".join(f"{s:.2f}" for s, _ in values)
            print(f"  {name:<62} median {wall:6.2f} s  ({wall / base:.2f}x export)  peak RSS {rss:6.0f} MiB  [{every}]")


def manifest_rows(manifest):
    """Rows per source, from the files the export's manifest lists (receipts/<source>/...)."""
    counted = {}
    for name, (table, _, _) in TABLES.items():
        files = manifest["tables"].get(table, {}).get("files", [])
        if table == "receipts":
            files = [f for f in files if f["path"].startswith(f"receipts/{name}/")]
        counted[name] = sum(f["rows"] for f in files)
    return counted


if __name__ == "__main__":
    main()
