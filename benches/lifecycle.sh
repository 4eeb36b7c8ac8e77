#!/usr/bin/env bash
# Does carrying a backlog make a night slower? (DESIGN §9, issue "Across nights")
#
# One night of ORDERS orders is run twice, side by side and alternating: once alone
# (--no-previous) and once following a previous run that holds about 100k open findings
# (a day generated with --reorder-rate 0.1: every reordered order owes points and a WMS
# lock). Prints the median wall time of each and their ratio; the carrying run must stay
# within 1.3x of the lone one.
#
#   BIN=~/.cache/effect-recon/target/release/effect-recon benches/lifecycle.sh
#
# BIN_BEFORE=<another build> times that build in the same rounds (each round runs both
# builds, alone then chained, the order alternating), so that a change is measured
# against the build before it under the same machine noise.
set -euo pipefail
BIN=${BIN:-${CARGO_TARGET_DIR:-$HOME/.cache/effect-recon/target}/release/effect-recon}
ORDERS=${ORDERS:-1000000}
REPS=${REPS:-3}
WORK=${WORK:-/tmp/effect-recon-lifecycle}
THREADS=${THREADS:-2}

mkdir -p "$WORK"
if [ ! -f "$WORK/previous/manifest.json" ]; then
  "$BIN" gen --orders "$ORDERS" --seed 5 --cut 2026-11-28T16:00:00Z --reorder-rate 0.1 \
    --out "$WORK/previous" --replace >/dev/null
fi
if [ ! -f "$WORK/night/manifest.json" ]; then
  "$BIN" gen --orders "$ORDERS" --seed 6 --cut 2026-11-29T16:00:00Z --out "$WORK/night" --replace >/dev/null
fi
if [ ! -f "$WORK/runs/run=previous/manifest.json" ]; then
  "$BIN" run --snapshot "$WORK/previous" --out "$WORK/runs" --no-previous --run-id previous \
    --replace -q >/dev/null || [ $? -eq 1 ]
fi
open=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['open'])" "$WORK/runs/run=previous/summary.json")

time_run() { # binary, label, extra args...
  local bin=$1 label=$2; shift 2
  local start end
  start=$(date +%s.%N)
  "$bin" run --snapshot "$WORK/night" --out "$WORK/runs" --run-id "$label" --replace -q \
    --target-partitions "$THREADS" "$@" >/dev/null
  end=$(date +%s.%N)
  python3 -c "print(f'{$end - $start:.3f}')"
}

median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
summary() { python3 -c "import json,sys; s=json.load(open(sys.argv[1])); print(f\"new {s['new']}, persisting {s['persisting']}, resolved {sum(s['resolved'].values())} {s['resolved']}, open {s['open']}\")" "$1"; }
range() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {printf "min %s max %s", a[1], a[NR]}'; }

builds=("$BIN")
[ -n "${BIN_BEFORE:-}" ] && builds+=("$BIN_BEFORE")
declare -A alone chained
for bin in "${builds[@]}"; do time_run "$bin" warmup --no-previous >/dev/null; done
for rep in $(seq 1 "$REPS"); do
  order=("${builds[@]}")
  if [ $((rep % 2)) -eq 0 ] && [ "${#builds[@]}" -eq 2 ]; then order=("${builds[1]}" "${builds[0]}"); fi
  for bin in "${order[@]}"; do
    alone[$bin]+="$(time_run "$bin" alone --no-previous) "
    chained[$bin]+="$(time_run "$bin" chained --previous "$WORK/runs/run=previous") "
  done
done
echo "night: $ORDERS orders (gen --seed 6), threads $THREADS, $REPS reps"
echo "previous run: $open open findings"
for bin in "${builds[@]}"; do
  read -r -a a <<<"${alone[$bin]}"; read -r -a c <<<"${chained[$bin]}"
  ma=$(median "${a[@]}"); mc=$(median "${c[@]}")
  echo "binary $bin"
  echo "  alone   (--no-previous): median ${ma}s ($(range "${a[@]}"))  [${a[*]}]"
  echo "  chained (--previous):    median ${mc}s ($(range "${c[@]}"))  [${c[*]}]"
  python3 -c "print(f'  chained / alone = {$mc / $ma:.2f}x (must be <= 1.30x)')"
done
echo "chained night: $(summary "$WORK/runs/run=chained/summary.json")"
