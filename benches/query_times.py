#!/usr/bin/env python3
"""Where a run's time goes: `run --explain` REPS times, the smallest time of each query
(summed over its order_id ranges) and of each stage (validate, reconcile, write), in
milliseconds.

    python3 benches/query_times.py --bin BIN --snapshot DAY --out RUNS [--reps 5] \\
        [-- extra run arguments, e.g. --no-previous or --previous RUNS/run=ID]
"""
import argparse, collections, re, subprocess, sys

def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bin", required=True, help="the effect-recon binary")
    p.add_argument("--snapshot", required=True)
    p.add_argument("--out", required=True, help="the run folder's parent (run id: query-times)")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("extra", nargs="*", help="more `run` arguments (after --)")
    a = p.parse_args()
    times = collections.OrderedDict()
    for _ in range(a.reps):
        command = [a.bin, "run", "--snapshot", a.snapshot, "--out", a.out, "--run-id", "query-times",
                   "--replace", "--target-partitions", str(a.threads), "--explain", *a.extra]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode not in (0, 1):
            sys.exit(f"query_times: {' '.join(command)} exited {done.returncode}:\n{done.stderr}")
        # A query run once per order_id range appears once per range: its time is their sum.
        run = collections.OrderedDict()
        for name, ms, s in re.findall(r"physical plan of sql/([a-z_]+)\.sql \((?:(\d+)ms|([\d.]+)s)\)", done.stdout):
            run[name] = run.get(name, 0) + (int(ms) if ms else round(float(s) * 1000))
        for name, ms in run.items():
            times.setdefault(name, []).append(ms)
        stages = re.search(r"time: validate (\d+)ms, reconcile (\d+)ms, write (\d+)ms", done.stdout)
        for stage, ms in zip(["validate", "reconcile", "write"], stages.groups()):
            times.setdefault(f"({stage})", []).append(int(ms))
    for name, values in times.items():
        print(f"{name:22s} min {min(values):5d} ms  all {values}")

if __name__ == "__main__":
    main()
