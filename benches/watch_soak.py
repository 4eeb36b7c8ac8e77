#!/usr/bin/env python3
"""`watch` soak (issue #24): 1,000 short cycles of one process; its resident memory, open
file descriptors and cycle wall time sampled as it goes. Flat curves mean nothing leaks
per cycle (memory, descriptors) and nothing grows with the chain (time).

A generated day is loaded into SQLite; `watch --every 5m` runs on a replay clock 1,000
times faster than the wall (EFFECT_RECON_CLOCK), so a cycle starts every 0.3 s or, when
the previous one took longer, at once. Compaction and gc run every 12 cycles, as by
default. Nothing changes in the database, so every cycle after the first is quiet.

Usage: python3 benches/watch_soak.py [--cycles 1000] [--orders 2000]
Needs the release binary ($CARGO_TARGET_DIR/release/effect-recon or EFFECT_RECON_BIN).
"""
from __future__ import annotations

import argparse
import datetime as dt
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TARGET = Path(os.environ.get("CARGO_TARGET_DIR", Path.home() / ".cache/effect-recon/target"))
BIN = Path(os.environ.get("EFFECT_RECON_BIN", TARGET / "release/effect-recon"))


def proc_sample(pid: int) -> tuple[int, int]:
    """(VmRSS KiB, open file descriptors) of a live process."""
    rss = 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1])
    return rss, len(os.listdir(f"/proc/{pid}/fd"))


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--cycles", type=int, default=1000)
    p.add_argument("--orders", type=int, default=2000)
    p.add_argument("--every", type=int, default=25, help="sample every N cycles")
    p.add_argument("--work", type=Path, default=Path("/tmp/effect-recon-watch-soak"))
    args = p.parse_args()
    shutil.rmtree(args.work, ignore_errors=True)
    args.work.mkdir(parents=True)
    day, db = args.work / "day", args.work / "fulfilment.db"
    subprocess.run([BIN, "gen", "--out", day, "--orders", str(args.orders), "--seed", "5"], check=True, capture_output=True)
    subprocess.run([BIN, "load", "--snapshot", day, "--url", f"sqlite://{db}"], check=True, capture_output=True)
    job = (REPO / "fixtures/demo/job.toml").read_text()
    job = job.replace('root     = "recon"', f'root     = "{args.work / "recon"}"').replace("sqlite:fulfilment.db", f"sqlite:{db}")
    # A 2 s margin, as a job on a database whose clock it trusts: with the default 5 min,
    # every cycle in the first 5 wall minutes after the load would re-read every row.
    job += '\n[incremental]\nmargin = "2s"\n'
    (args.work / "job.toml").write_text(job)
    # The clock starts a day after the generator's dump, so every grace is over.
    start = dt.datetime(2026, 11, 30, 23, 0, tzinfo=dt.timezone.utc)
    clock = f"{start:%Y-%m-%dT%H:%M:%SZ}@{int(time.time() * 1e6)}x1000"
    env = dict(os.environ, EFFECT_RECON_CLOCK=clock)
    watch = subprocess.Popen([BIN, "watch", "--config", args.work / "job.toml", "--every", "5m"], env=env,
                             stderr=subprocess.PIPE, text=True)
    samples: list[tuple[int, int, int, float]] = []
    times: list[float] = []
    cycles = 0
    for line in watch.stderr:
        m = re.match(r"watch: cycle \S+ \S+: .*; ([\d.]+)(ms|s)$", line.strip())
        if not m:
            continue
        cycles += 1
        times.append(float(m[1]) / (1000 if m[2] == "ms" else 1))
        if cycles == 1 or cycles % args.every == 0:
            rss, fds = proc_sample(watch.pid)
            samples.append((cycles, rss, fds, times[-1]))
        if cycles >= args.cycles:
            break
    watch.send_signal(signal.SIGTERM)
    watch.wait(timeout=120)

    print(f"watch soak: {cycles} cycles of one process ({BIN} --every 5m on a x1000 replay clock), {args.orders} orders")
    print("| cycle | RSS MiB | open fds | that cycle's wall time |")
    print("|---:|---:|---:|---:|")
    for n, rss, fds, took in samples:
        print(f"| {n} | {rss / 1024:.1f} | {fds} | {took * 1000:.0f} ms |")
    first, last = samples[1] if len(samples) > 1 else samples[0], samples[-1]
    per100 = [sum(times[i:i + 100]) / len(times[i:i + 100]) * 1000 for i in range(0, len(times), 100)]
    print(f"RSS {first[1] / 1024:.1f} -> {last[1] / 1024:.1f} MiB (cycle {first[0]} -> {last[0]}), "
          f"fds {first[2]} -> {last[2]}; mean cycle time per 100 cycles (ms): {', '.join(f'{t:.0f}' for t in per100)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
