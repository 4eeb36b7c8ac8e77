#!/usr/bin/env bash
# Does `run --memory-limit` bound the whole process, not only the operators that spill?
# (issue 27 item 6)
#
# One generated day of ORDERS orders (reused when its snapshot is complete) is run once
# per limit in LIMITS ("none" = no --memory-limit), each under GNU time. Prints per run the
# wall time, the peak RSS, RSS ÷ limit, the rows judged per second per core, and whether
# `verify` finds the run equal to gen's ground truth.
#
#   ORDERS=100000000 LIMITS="8GiB 4GiB" benches/memory_limit.sh
set -euo pipefail
BIN=${BIN:-${CARGO_TARGET_DIR:-$HOME/.cache/effect-recon/target}/release/effect-recon}
ORDERS=${ORDERS:-10000000}
LIMITS=${LIMITS:-"none 2GiB 1GiB"}
THREADS=${THREADS:-2}
WORK=${WORK:-/tmp/effect-recon-memory/orders-$ORDERS}

mkdir -p "$WORK"
if [ ! -f "$WORK/snapshot/manifest.json" ]; then
  echo "gen: $ORDERS orders (seed 7) into $WORK/snapshot"
  /usr/bin/time -f "gen: wall %e s, peak RSS %M KiB" \
    "$BIN" gen --orders "$ORDERS" --seed 7 --out "$WORK/snapshot" --replace >/dev/null
fi
rows=$(python3 -c "import json,sys; m=json.load(open(sys.argv[1])); print(sum(f['rows'] for t in m['tables'].values() for f in t['files']))" "$WORK/snapshot/manifest.json" 2>/dev/null || echo 0)
bytes() { # "4GiB" -> bytes, "none" -> 0
  python3 -c "
import re,sys
m=re.fullmatch(r'(\d+)(GiB|MiB)?', sys.argv[1])
print(0 if not m else int(m[1]) << {'GiB':30,'MiB':20,None:0}[m[2]])" "$1"
}

echo "day: $ORDERS orders, $rows input rows; threads $THREADS; binary $BIN"
printf '%-8s %10s %12s %10s %16s  %s\n' limit wall_s peak_rss RSS/limit rows/s/core verify
for limit in $LIMITS; do
  args=()
  [ "$limit" != none ] && args=(--memory-limit "$limit")
  out="$WORK/runs-$limit"
  rm -rf "$out"
  status=0
  /usr/bin/time -o "$WORK/time.txt" -f "%e %M" \
    "$BIN" run --snapshot "$WORK/snapshot" --out "$out" --run-id bench --replace -q \
      --target-partitions "$THREADS" "${args[@]}" >/dev/null || status=$?
  read -r wall kib < <(tail -n 1 "$WORK/time.txt")
  if [ "$status" -gt 1 ]; then
    verdict="run FAILED (exit $status; its error is above)"
  elif "$BIN" verify --truth "$WORK/snapshot/truth.parquet" --run "$out/run=bench" >/dev/null 2>&1; then
    verdict="equals the truth"
  else
    verdict="DIFFERS from the truth"
  fi
  limit_bytes=$(bytes "$limit")
  python3 - "$limit" "$wall" "$kib" "$limit_bytes" "$rows" "$THREADS" "$verdict" <<'EOF'
import sys
limit, wall, kib, limit_bytes, rows, threads, verdict = sys.argv[1:]
wall, rss = float(wall), int(kib) * 1024
ratio = f"{rss / int(limit_bytes):.2f}" if int(limit_bytes) else "-"
rate = f"{int(rows) / wall / int(threads) / 1e6:.2f}M" if int(rows) else "-"
print(f"{limit:<8} {wall:>10.1f} {rss / 2**30:>8.2f} GiB {ratio:>10} {rate:>16}  {verdict}")
EOF
done
