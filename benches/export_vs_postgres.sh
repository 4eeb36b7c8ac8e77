#!/usr/bin/env bash
# Export throughput from PostgreSQL, side by side with the stock client reading the same
# rows in the same order: `effect-recon export` (rows → Arrow → sorted by order_id → zstd
# Parquet) versus `psql -c "COPY (SELECT … ORDER BY order_id) TO STDOUT" > /dev/null`
# (rows → COPY text, discarded). The twin of export_vs_mariadb.sh; for the record it also
# times COPY without the ORDER BY (the server's bare scan).
#
# Usage: benches/export_vs_postgres.sh [SNAPSHOT_DIR]
#   SNAPSHOT_DIR   optional snapshot to load first (into a fresh database) with `effect-recon load`
# Environment:
#   EFFECT_RECON_BIN   binary to time (default: $CARGO_TARGET_DIR/release/effect-recon)
#   BENCH_DB           database name (default: er_bench); recreated when SNAPSHOT_DIR is given
#   BENCH_HOST/BENCH_PORT/BENCH_USER   server (default 127.0.0.1, 5432, postgres; no password)
#   BENCH_CUT          cut (default: the snapshot's cut, else now)
#   BENCH_CONNECTIONS  export connections (default 4)
#   BENCH_PUSHED       1: the export's queries take the chunk's order_id range themselves
#                      (four parameters, docs/JOB_CONFIG.md); default 0 (two, wrapped)
#   BENCH_CHUNK_ROWS   export chunk_rows (default: the exporter's own)
#   BENCH_REPEAT       rounds of (export, sorted client, unsorted client); each reader's
#                      median is reported, with every sample (default 3: a shared VM is noisy)
set -euo pipefail

target_dir=${CARGO_TARGET_DIR:-$HOME/.cache/effect-recon/target}
bin=${EFFECT_RECON_BIN:-$target_dir/release/effect-recon}
db=${BENCH_DB:-er_bench}
host=${BENCH_HOST:-127.0.0.1}
port=${BENCH_PORT:-5432}
user=${BENCH_USER:-postgres}
connections=${BENCH_CONNECTIONS:-4}
pushed=${BENCH_PUSHED:-0}
chunk_rows=${BENCH_CHUNK_ROWS:-}
repeat=${BENCH_REPEAT:-3}
snapshot=${1:-}

[[ -x $bin ]] || { echo "no binary at $bin (set EFFECT_RECON_BIN or cargo build --release)" >&2; exit 2; }
psql_base=(psql --no-psqlrc --quiet --host="$host" --port="$port" --username="$user")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
url="postgres://$user@$host:$port/$db"

if [[ -n $snapshot ]]; then
  "${psql_base[@]}" --dbname=postgres -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db"
  echo "loading $snapshot into $db ..."
  "$bin" load --snapshot "$snapshot" --url "$url" | tail -1
  "${psql_base[@]}" --dbname="$db" -c "VACUUM ANALYZE"
  cut=${BENCH_CUT:-$(sed -n 's/.*"cut": *"\([^"]*\)".*/\1/p' "$snapshot/manifest.json" | head -1)}
else
  cut=${BENCH_CUT:-$(date -u +%Y-%m-%dT%H:%M:%SZ)}
fi

# The exporter binds (cut - 1 day - 30 days, cut]; the client gets the same bounds as literals.
lower_sql=$(date -u -d "$cut - 31 days" '+%Y-%m-%d %H:%M:%S+00')
cut_sql=$(date -u -d "$cut" '+%Y-%m-%d %H:%M:%S+00')

queries=(
  "ledger|fulfilment|SELECT msg_id, order_id, event_type, expected_status, action, observed_status, topic, kafka_partition, kafka_offset, consumer_id, decided_at FROM idempotent_msg WHERE decided_at > \$1 AND decided_at <= \$2"
  "status_history|orders|SELECT order_id, status, changed_at FROM order_status_history WHERE changed_at > \$1 AND changed_at <= \$2"
  "receipts|points|SELECT receipt_id, order_id, effect, msg_id, status, created_at FROM points_receipt WHERE created_at > \$1 AND created_at <= \$2"
  "receipts|wms|SELECT receipt_id, order_id, effect, msg_id, status, created_at FROM wms_receipt WHERE created_at > \$1 AND created_at <= \$2"
  "receipts|logistics|SELECT receipt_id, order_id, effect, msg_id, status, created_at FROM logistics_receipt WHERE created_at > \$1 AND created_at <= \$2"
)

{
  echo "lookback = \"30d\""
  echo "[export]"
  echo "connections = $connections"
  if [[ -n $chunk_rows ]]; then echo "chunk_rows = $chunk_rows"; fi
  for q in "${queries[@]}"; do
    IFS='|' read -r table name sql <<<"$q"
    if [[ $pushed == 1 ]]; then sql="$sql AND order_id BETWEEN \$3 AND \$4"; fi
    printf '\n[[source]]\ntable = "%s"\nname = "%s"\nurl = "%s"\nquery = """\n%s\n"""\n' "$table" "$name" "$url" "$sql"
  done
} >"$work/job.toml"

now() { date +%s.%N; }

time_copy() { # $1: SQL suffix (ORDER BY or nothing); prints the seconds
  local start sql
  start=$(now)
  for q in "${queries[@]}"; do
    IFS='|' read -r _ _ sql <<<"$q"
    sql=${sql/\$1/\'$lower_sql\'}
    sql=${sql/\$2/\'$cut_sql\'}
    "${psql_base[@]}" --dbname="$db" -c "COPY ($sql$1) TO STDOUT" >/dev/null
  done
  echo "$(now) - $start" | bc -l
}
time_copy "" >/dev/null # warm-up: every reader below finds the same cache

median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
export_samples=() copy_samples=() scan_samples=()
for round in $(seq 1 "$repeat"); do
  rm -rf "$work/snapshot"
  start=$(now)
  "$bin" export --config "$work/job.toml" --out "$work/snapshot" --cut "$cut" --quiet >"$work/export.out"
  export_samples+=("$(echo "$(now) - $start" | bc -l)")
  copy_samples+=("$(time_copy " ORDER BY order_id")")
  scan_samples+=("$(time_copy "")")
  echo "round $round/$repeat: export ${export_samples[-1]} s, sorted client ${copy_samples[-1]} s, unsorted ${scan_samples[-1]} s" >&2
done
export_secs=$(median "${export_samples[@]}")
copy_secs=$(median "${copy_samples[@]}")
scan_secs=$(median "${scan_samples[@]}")
rows=$(sed -n 's/.*: \([0-9]*\) rows from.*/\1/p' "$work/export.out")

rate() { echo "$1 / $2" | bc -l | xargs printf '%.0f'; }
echo "connections=$connections pushed=$pushed chunk_rows=${chunk_rows:-default}"
printf '%-44s %12s %10s %14s\n' "reader (median of $repeat)" "rows" "seconds" "rows/s"
printf '%-44s %12d %10.3f %14s\n' "effect-recon export (Parquet)" "$rows" "$export_secs" "$(rate "$rows" "$export_secs")"
printf '%-44s %12d %10.3f %14s\n' "psql COPY (... ORDER BY order_id) TO STDOUT" "$rows" "$copy_secs" "$(rate "$rows" "$copy_secs")"
printf '%-44s %12d %10.3f %14s\n' "(psql COPY (...) TO STDOUT, unsorted)" "$rows" "$scan_secs" "$(rate "$rows" "$scan_secs")"
printf "ratio export/client rows/s: %.2f\n" "$(echo "$copy_secs / $export_secs" | bc -l)"
