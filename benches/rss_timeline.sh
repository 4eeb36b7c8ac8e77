#!/usr/bin/env bash
# When does a command reach its peak memory? Runs it, samples its resident set every 50 ms
# (/proc/PID/status VmRSS) into TIMELINE, and prints the peak, when it came, and when the
# command ended; the command's own output goes to TIMELINE.stdout. With `run --explain`,
# the stage and query times in that output place the peak in a query.
#
#   benches/rss_timeline.sh TIMELINE -- BIN run --snapshot S --out O --memory-limit 512MiB --explain
set -euo pipefail
[ $# -ge 3 ] && [ "$2" = "--" ] || { sed -n '2,7p' "$0" >&2; exit 2; }
timeline=$1; shift 2
start=$(date +%s.%N)
"$@" >"$timeline.stdout" 2>&1 &
pid=$!
: >"$timeline"
while kill -0 "$pid" 2>/dev/null; do
  kib=$(awk '/^VmRSS/ {print $2}' "/proc/$pid/status" 2>/dev/null || true)
  [ -n "$kib" ] && printf '%.3f %s\n' "$(echo "$(date +%s.%N) - $start" | bc -l)" "$kib" >>"$timeline"
  sleep 0.05
done
status=0
wait "$pid" || status=$?
sort -k2 -n "$timeline" | tail -n 1 | awk '{printf "peak RSS %.0f MiB at %s s\n", $2 / 1024, $1}'
tail -n 1 "$timeline" | awk -v s="$status" '{print "ended at " $1 " s, exit " s}'
exit "$status"
