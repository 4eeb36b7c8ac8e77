#!/usr/bin/env python3
"""Two builds on the same incremental night, alternating (the A/B under issue 23's fifth pass).

Takes a chain kept by `incremental_nights.py --keep`, applies night N's changes to its
MariaDB database once (`--apply N`), then runs `nightly` of each binary on a fresh copy of
the chain's root, alternating, `--rounds` times, and prints each run's wall clock, export
and run time.

    python3 benches/incremental_ab.py --work /tmp/er-incremental-XXXX --apply 8
    python3 benches/incremental_ab.py --work /tmp/er-incremental-XXXX \\
        --cut 2026-12-07T16:00:00Z --binary old=/tmp/effect-recon-old --binary new=/tmp/effect-recon-new
"""

import argparse
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import incremental_nights as bench  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--work", required=True, help="a folder kept by incremental_nights.py --keep")
    ap.add_argument("--db", default="er_incremental")
    ap.add_argument("--apply", type=int, help="apply night N's changes to the database and stop")
    ap.add_argument("--cut", help="the night's cut")
    ap.add_argument("--binary", action="append", default=[], help="NAME=PATH, two or more")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    work = Path(args.work)
    if args.apply is not None:
        m = bench.Maria(args.db)
        bench.copy_day(m, args.apply, f"n{args.apply}", (100 + args.apply) * 10_000_000)
        bench.changes(m, args.apply)
        print(f"night {args.apply} applied")
        return
    binaries = dict(b.split("=", 1) for b in args.binary)
    job = (work / "incr.toml").read_text()
    walls = {name: [] for name in binaries}
    scratch = work / "ab"
    for rnd in range(args.rounds):
        for name, binary in binaries.items():
            root = scratch / f"{name}-{rnd}"
            shutil.rmtree(root, ignore_errors=True)
            shutil.copytree(work / "incr", root)
            path = scratch / f"{name}-{rnd}.toml"
            path.write_text(job.replace(str(work / "incr"), str(root)))
            started = time.monotonic()
            proc = subprocess.run([binary, "nightly", "--config", str(path), "--cut", args.cut],
                                  capture_output=True, text=True)
            wall = time.monotonic() - started
            walls[name].append(wall)
            export = re.search(r"export done: .* in ([\d.,]+(?:ms|s))$", proc.stderr, re.M)
            run = re.search(r"run done: .* in ([\d.,]+(?:ms|s))$", proc.stderr, re.M)
            print(f"{name} round {rnd}: {wall:.2f} s, exit {proc.returncode}, export "
                  f"{export.group(1) if export else '?'}, run {run.group(1) if run else '?'}", flush=True)
    for name, values in walls.items():
        values.sort()
        print(f"{name}: min/median/max " + " / ".join(f"{v:.2f}" for v in
              (values[0], values[len(values) // 2], values[-1])))


if __name__ == "__main__":
    main()
