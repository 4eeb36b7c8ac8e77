#!/usr/bin/env bash
# Export throughput from MariaDB/MySQL, side by side with the stock client reading the
# same rows in the same order: `effect-recon export` (rows → Arrow → sorted by order_id →
# zstd Parquet) versus `mariadb --batch --quick -e 'SELECT … ORDER BY order_id' > /dev/null`
# (rows → tab-separated text, discarded). For the record it also times the client without
# the ORDER BY (the server's bare scan, a floor no sorted reader reaches).
#
# Usage: benches/export_vs_mariadb.sh [SNAPSHOT_DIR]
#   SNAPSHOT_DIR   optional snapshot to load first (into a fresh database) with `effect-recon load`
# Environment:
#   EFFECT_RECON_BIN   binary to time (default: $CARGO_TARGET_DIR/release/effect-recon; build it
#                      with `cargo build --release` — a debug binary only proves the script works)
#   BENCH_DB           database name (default: er_bench); recreated when SNAPSHOT_DIR is given
#   BENCH_HOST/BENCH_PORT/BENCH_USER   server (default 127.0.0.1, 3306, root; no password)
#   BENCH_CUT          cut (default: the snapshot's cut, else now)
#   BENCH_CONNECTIONS  export connections (default 4)
#   BENCH_PUSHED       1: the export's queries take the chunk's order_id range themselves
#                      (four parameters, docs/JOB_CONFIG.md); default 0 (two, wrapped)
#   BENCH_CHUNK_ROWS   export chunk_rows (default: the exporter's own)
#   BENCH_REPEAT       rounds of (export, sorted client, unsorted client); each reader's
#                      median is reported, with every sample (default 3: a shared VM is noisy)
#   BENCH_BUFFER_POOL  bytes: innodb_buffer_pool_size for the run, restored at the end (as
#                      compare.py --buffer-pool); default: leave the server's as it is
#   BENCH_SCHEMA       recommended (default): sql/schema/mysql.sql as loaded, UTC DATETIMEs;
#                      team: a team's own schema, the shape issue #15 quotes: the same tables
#                      with their own column names (order_no, message_key, gmt_* times),
#                      DATETIMEs stored as +08:00 wall time, mapped by SELECT aliases and
#                      `timezone = "+08:00"` (the load stores +08:00 and renames the columns)
set -euo pipefail

target_dir=${CARGO_TARGET_DIR:-$HOME/.cache/effect-recon/target}
bin=${EFFECT_RECON_BIN:-$target_dir/release/effect-recon}
db=${BENCH_DB:-er_bench}
host=${BENCH_HOST:-127.0.0.1}
port=${BENCH_PORT:-3306}
user=${BENCH_USER:-root}
connections=${BENCH_CONNECTIONS:-4}
pushed=${BENCH_PUSHED:-0}
chunk_rows=${BENCH_CHUNK_ROWS:-}
repeat=${BENCH_REPEAT:-3}
schema=${BENCH_SCHEMA:-recommended}
snapshot=${1:-}
case $schema in
  recommended) zone=+00:00 zone_hours=0 key_column=order_id ;;
  team) zone=+08:00 zone_hours=8 key_column=order_no ;;
  *) echo "BENCH_SCHEMA must be recommended or team, not '$schema'" >&2; exit 2 ;;
esac

[[ -x $bin ]] || { echo "no binary at $bin (set EFFECT_RECON_BIN or cargo build --release)" >&2; exit 2; }
client=(mariadb --host="$host" --port="$port" --user="$user")
work=$(mktemp -d)
pool_before=$("${client[@]}" -N -e "SELECT @@innodb_buffer_pool_size")
restore() {
  rm -rf "$work"
  if [[ -n ${BENCH_BUFFER_POOL:-} ]]; then
    "${client[@]}" -e "SET GLOBAL innodb_buffer_pool_size = $pool_before"
  fi
}
trap restore EXIT
if [[ -n ${BENCH_BUFFER_POOL:-} ]]; then
  "${client[@]}" -e "SET GLOBAL innodb_buffer_pool_size = $BENCH_BUFFER_POOL"
fi
url="mysql://$user@$host:$port/$db"

if [[ -n $snapshot ]]; then
  "${client[@]}" -e "DROP DATABASE IF EXISTS $db; CREATE DATABASE $db"
  echo "loading $snapshot into $db ..."
  "$bin" load --snapshot "$snapshot" --url "$url" --timezone "$zone" | tail -1
  if [[ $schema == team ]]; then
    # The team's own names; indexes follow their columns.
    "${client[@]}" "$db" -e "
      ALTER TABLE idempotent_msg RENAME COLUMN msg_id TO message_key, RENAME COLUMN order_id TO order_no, RENAME COLUMN decided_at TO gmt_decided;
      ALTER TABLE order_status_history RENAME COLUMN order_id TO order_no, RENAME COLUMN changed_at TO gmt_changed;
      ALTER TABLE points_receipt RENAME COLUMN receipt_id TO receipt_no, RENAME COLUMN order_id TO order_no, RENAME COLUMN msg_id TO message_key, RENAME COLUMN created_at TO gmt_create;
      ALTER TABLE wms_receipt RENAME COLUMN receipt_id TO receipt_no, RENAME COLUMN order_id TO order_no, RENAME COLUMN msg_id TO message_key, RENAME COLUMN created_at TO gmt_create;
      ALTER TABLE logistics_receipt RENAME COLUMN receipt_id TO receipt_no, RENAME COLUMN order_id TO order_no, RENAME COLUMN msg_id TO message_key, RENAME COLUMN created_at TO gmt_create;"
  fi
  cut=${BENCH_CUT:-$(sed -n 's/.*"cut": *"\([^"]*\)".*/\1/p' "$snapshot/manifest.json" | head -1)}
else
  cut=${BENCH_CUT:-$(date -u +%Y-%m-%dT%H:%M:%SZ)}
fi

# The exporter binds (cut - 1 day - 30 days, cut] as wall time in the source's zone; the
# client gets the same bounds as literals.
lower_sql=$(date -u -d "$cut + $zone_hours hours - 31 days" '+%Y-%m-%d %H:%M:%S')
cut_sql=$(date -u -d "$cut + $zone_hours hours" '+%Y-%m-%d %H:%M:%S')

# table|name|query (BENCH_PUSHED appends the range on $key_column)
if [[ $schema == recommended ]]; then queries=(
  "ledger|fulfilment|SELECT msg_id, order_id, event_type, expected_status, action, observed_status, topic, kafka_partition, kafka_offset, consumer_id, decided_at FROM idempotent_msg WHERE decided_at > ? AND decided_at <= ?"
  "status_history|orders|SELECT order_id, status, changed_at FROM order_status_history WHERE changed_at > ? AND changed_at <= ?"
  "receipts|points|SELECT receipt_id, order_id, effect, msg_id, status, created_at FROM points_receipt WHERE created_at > ? AND created_at <= ?"
  "receipts|wms|SELECT receipt_id, order_id, effect, msg_id, status, created_at FROM wms_receipt WHERE created_at > ? AND created_at <= ?"
  "receipts|logistics|SELECT receipt_id, order_id, effect, msg_id, status, created_at FROM logistics_receipt WHERE created_at > ? AND created_at <= ?"
); else queries=(
  "ledger|fulfilment|SELECT message_key AS msg_id, order_no AS order_id, event_type, expected_status, action, observed_status, topic, kafka_partition, kafka_offset, consumer_id, gmt_decided AS decided_at FROM idempotent_msg WHERE gmt_decided > ? AND gmt_decided <= ?"
  "status_history|orders|SELECT order_no AS order_id, status, gmt_changed AS changed_at FROM order_status_history WHERE gmt_changed > ? AND gmt_changed <= ?"
  "receipts|points|SELECT receipt_no AS receipt_id, order_no AS order_id, effect, message_key AS msg_id, status, gmt_create AS created_at FROM points_receipt WHERE gmt_create > ? AND gmt_create <= ?"
  "receipts|wms|SELECT receipt_no AS receipt_id, order_no AS order_id, effect, message_key AS msg_id, status, gmt_create AS created_at FROM wms_receipt WHERE gmt_create > ? AND gmt_create <= ?"
  "receipts|logistics|SELECT receipt_no AS receipt_id, order_no AS order_id, effect, message_key AS msg_id, status, gmt_create AS created_at FROM logistics_receipt WHERE gmt_create > ? AND gmt_create <= ?"
); fi

{
  echo "lookback = \"30d\""
  echo "[export]"
  echo "connections = $connections"
  if [[ -n $chunk_rows ]]; then echo "chunk_rows = $chunk_rows"; fi
  for q in "${queries[@]}"; do
    IFS='|' read -r table name sql <<<"$q"
    if [[ $pushed == 1 ]]; then sql="$sql AND $key_column BETWEEN ? AND ?"; fi
    printf '\n[[source]]\ntable = "%s"\nname = "%s"\nurl = "%s"\ntimezone = "%s"\nquery = """\n%s\n"""\n' "$table" "$name" "$url" "$zone" "$sql"
  done
} >"$work/job.toml"

now() { date +%s.%N; }


time_client() { # $1: SQL suffix (ORDER BY or nothing); prints the seconds
  local start sql
  start=$(now)
  for q in "${queries[@]}"; do
    IFS='|' read -r _ _ sql <<<"$q"
    sql=${sql/\?/\'$lower_sql\'}
    sql=${sql/\?/\'$cut_sql\'}
    "${client[@]}" --batch --quick "$db" -e "$sql$1" >/dev/null
  done
  echo "$(now) - $start" | bc -l
}
time_client "" >/dev/null # warm-up: every reader below finds the same cache

median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
export_samples=() client_samples=() scan_samples=()
for round in $(seq 1 "$repeat"); do
  rm -rf "$work/snapshot"
  start=$(now)
  "$bin" export --config "$work/job.toml" --out "$work/snapshot" --cut "$cut" --quiet >"$work/export.out"
  export_samples+=("$(echo "$(now) - $start" | bc -l)")
  client_samples+=("$(time_client " ORDER BY order_id")")
  scan_samples+=("$(time_client "")")
  echo "round $round/$repeat: export ${export_samples[-1]} s, sorted client ${client_samples[-1]} s, unsorted ${scan_samples[-1]} s" >&2
done
export_secs=$(median "${export_samples[@]}")
client_secs=$(median "${client_samples[@]}")
scan_secs=$(median "${scan_samples[@]}")
rows=$(sed -n 's/.*: \([0-9]*\) rows from.*/\1/p' "$work/export.out")

rate() { echo "$1 / $2" | bc -l | xargs printf '%.0f'; }
pool=$("${client[@]}" -N -e "SELECT @@innodb_buffer_pool_size")
data=$("${client[@]}" -N -e "SELECT SUM(data_length + index_length) FROM information_schema.tables WHERE table_schema = '$db'")
echo "schema=$schema connections=$connections pushed=$pushed chunk_rows=${chunk_rows:-default} buffer_pool=$((pool >> 20))MiB data+indexes=$((data >> 20))MiB"
printf '%-44s %12s %10s %14s\n' "reader (median of $repeat)" "rows" "seconds" "rows/s"
printf '%-44s %12d %10.3f %14s\n' "effect-recon export (Parquet)" "$rows" "$export_secs" "$(rate "$rows" "$export_secs")"
printf '%-44s %12d %10.3f %14s\n' "mariadb --batch --quick, ORDER BY order_id" "$rows" "$client_secs" "$(rate "$rows" "$client_secs")"
printf '%-44s %12d %10.3f %14s\n' "(mariadb --batch --quick, unsorted)" "$rows" "$scan_secs" "$(rate "$rows" "$scan_secs")"
printf "ratio export/client rows/s: %.2f\n" "$(echo "$client_secs / $export_secs" | bc -l)"
