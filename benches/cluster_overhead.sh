#!/usr/bin/env bash
# `run` in process versus `run --engine ballista://…` on a local cluster of one scheduler
# and EXECUTORS executors of TASKS concurrent tasks each, side by side on the same
# generated day, checked byte for byte (outputs) and by --check-single-node once.
#
# Usage: benches/cluster_overhead.sh ORDERS [ORDERS ...]      e.g. 1000000 10000000
# Environment:
#   EFFECT_RECON_BIN   binary to time (default: $CARGO_TARGET_DIR/release/effect-recon;
#                      `cargo build --release` — a debug binary only proves the script works)
#   BENCH_DIR          where days and runs are written (default: a temporary folder, removed)
#   BENCH_SEED         seed of gen (default 5)
#   EXECUTORS, TASKS   cluster shape (default 2 executors x 1 task)
#   REPEAT             timed runs per engine and size; the best is reported (default 1)
set -euo pipefail

target_dir=${CARGO_TARGET_DIR:-$HOME/.cache/effect-recon/target}
bin=${EFFECT_RECON_BIN:-$target_dir/release/effect-recon}
seed=${BENCH_SEED:-5}
executors=${EXECUTORS:-2}
tasks=${TASKS:-1}
repeat=${REPEAT:-1}
[[ $# -ge 1 ]] || { sed -n '2,14p' "$0" >&2; exit 2; }
[[ -x $bin ]] || { echo "no binary at $bin (set EFFECT_RECON_BIN or cargo build --release)" >&2; exit 2; }

if [[ -n ${BENCH_DIR:-} ]]; then
  work=$BENCH_DIR; mkdir -p "$work"
else
  work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
fi

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
pids=()
stop_cluster() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap 'stop_cluster; [[ -z ${BENCH_DIR:-} ]] && rm -rf "$work"' EXIT

sched=$(port)
"$bin" cluster scheduler --port "$sched" >"$work/scheduler.log" 2>&1 & pids+=($!)
for i in $(seq 1 "$executors"); do
  mkdir -p "$work/executor-$i"
  "$bin" cluster executor --scheduler "127.0.0.1:$sched" --port "$(port)" --grpc-port "$(port)" \
    --concurrent-tasks "$tasks" --work-dir "$work/executor-$i" >"$work/executor-$i.log" 2>&1 & pids+=($!)
done
sleep 3
engine="ballista://127.0.0.1:$sched"
cores=$((executors * tasks))

now() { date +%s.%N; }
timed_run() { # out, extra args...; prints seconds
  local out=$1; shift
  rm -rf "$out"
  local start; start=$(now)
  "$bin" run --snapshot "$snapshot" --out "$out" --no-previous --quiet --target-partitions "$cores" "$@" >/dev/null
  echo "$(now) - $start" | bc -l
}
best() { printf '%s\n' "$@" | sort -g | head -1; }
same_outputs() { # two run roots: every Parquet file identical
  (cd "$1" && find . -name '*.parquet' -print0 | sort -z | xargs -0 sha256sum) >"$work/a.sum"
  (cd "$2" && find . -name '*.parquet' -print0 | sort -z | xargs -0 sha256sum) >"$work/b.sum"
  cmp -s "$work/a.sum" "$work/b.sum"
}

echo "machine: $(nproc) cores; cluster: 1 scheduler + $executors executors x $tasks task(s) on 127.0.0.1; in-process: --target-partitions $cores"
printf '%-10s %12s %14s %14s %8s %16s %16s %s\n' orders "input rows" "in-process s" "cluster s" ratio "in-proc rows/s/core" "cluster rows/s/core" identical
for orders in "$@"; do
  snapshot="$work/day-$orders"
  [[ -f $snapshot/manifest.json ]] || "$bin" gen --orders "$orders" --seed "$seed" --out "$snapshot" >/dev/null
  rows=$(python3 -c "import json,sys; m=json.load(open(sys.argv[1])); print(sum(f['rows'] for t in m['tables'].values() for f in t['files']))" "$snapshot/manifest.json")
  local_times=(); cluster_times=()
  for _ in $(seq 1 "$repeat"); do
    local_times+=("$(timed_run "$work/local-$orders")")
    cluster_times+=("$(timed_run "$work/cluster-$orders" --engine "$engine")")
  done
  l=$(best "${local_times[@]}"); c=$(best "${cluster_times[@]}")
  same=no; same_outputs "$work/local-$orders" "$work/cluster-$orders" && same=yes
  printf '%-10s %12d %14.2f %14.2f %8.2f %16.0f %16.0f %s\n' "$orders" "$rows" "$l" "$c" \
    "$(echo "$c / $l" | bc -l)" "$(echo "$rows / $l / $cores" | bc -l)" "$(echo "$rows / $c / $cores" | bc -l)" "$same"
done
# The correctness gate once, on the first size.
snapshot="$work/day-$1"
rm -rf "$work/checked"
"$bin" run --snapshot "$snapshot" --out "$work/checked" --no-previous --target-partitions "$cores" \
  --engine "$engine" --check-single-node 2>&1 | grep -E 'check-single-node|error' || true
