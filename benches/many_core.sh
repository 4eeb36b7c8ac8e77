#!/usr/bin/env bash
# The many-core sweep of issue #27 item 2, as one prepared script for a lent 16-core
# machine that has no network: run ÷ DuckDB at T = 2, 4, 8, 16 on 10M- and 30M-order days,
# outputs compared column by column (benches/compare.py), within one call's time limit.
#
# Prepared here (benches/README.md "On a lent many-core machine"):
#   carry/effect-recon.xz   the release binary, stripped and xz-compressed
#   .whl/duckdb-*.whl       DuckDB for the machine's Python (3.12)
# Run there from the repository root:
#   OUT=/some/folder bash benches/many_core.sh
# Environment: SMALL (default 10000000) and LARGE (default 30000000) orders; REPS_SMALL
# (default 2) and REPS_LARGE (default 1); THREADS (default "2 4 8 16"); OUT (results and
# logs, default /tmp/many-core).
#
# While the small day's sweep runs at T <= 8 (cores 0-7), the large day is generated on
# the last core, so the call's time goes to measuring; T = 16 runs after the generator ends.
set -euo pipefail

small=${SMALL:-10000000}
large=${LARGE:-30000000}
reps_small=${REPS_SMALL:-2}
reps_large=${REPS_LARGE:-1}
threads=${THREADS:-2 4 8 16}
out=${OUT:-/tmp/many-core}
work=/tmp/effect-recon-bench
mkdir -p "$out" "$work"
started=$(date +%s)
say() { echo "[$(( $(date +%s) - started ))s] $*"; }

say "machine: $(nproc) cores, $(free -g | awk '/Mem:/ {print $2}') GiB, $(uname -r)"
grep -m1 'model name' /proc/cpuinfo || true
if [[ -z ${SKIP_WHEELS:-} ]]; then  # SKIP_WHEELS=1: a machine with PyPI (compare.py makes its venv)
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
    export PYTHONPATH=/tmp/site
    python3 -c "import duckdb; print('duckdb', duckdb.__version__)"
fi
bin=/tmp/effect-recon
python3 -c "import lzma, shutil; shutil.copyfileobj(lzma.open('carry/effect-recon.xz'), open('$bin', 'wb'))"
chmod +x "$bin"
export EFFECT_RECON_BIN=$bin
"$bin" --version

small_snap=$work/orders-$small-seed-7/snapshot
large_snap=$work/orders-$large-seed-7/snapshot
say "gen $small orders"
"$bin" gen --out "$small_snap" --orders "$small" --seed 7 >"$out/gen-small.log" 2>&1
say "gen $large orders in the background, on the last core"
last=$(( $(nproc) - 1 ))
(taskset -c "$last" "$bin" gen --out "$large_snap" --orders "$large" --seed 7 >"$out/gen-large.log" 2>&1; \
    echo "exit $?" >>"$out/gen-large.log") &
gen_pid=$!

low=() high=()
for t in $threads; do
    if (( t <= last / 2 + 1 && t < last )); then low+=("$t"); else high+=("$t"); fi
done
compare() { # results-file, then compare.py's arguments
    local results=$1; shift
    python3 benches/compare.py --skip-mariadb --skip-scan --no-warmup --results "$out/$results" "$@" \
        2>&1 | tee -a "$out/compare.log"
}
if (( ${#low[@]} )); then
    say "$small orders, T = ${low[*]} (beside the generator)"
    compare small-low.md --snapshot "$small_snap" --threads "${low[@]}" --reps "$reps_small"
fi
say "waiting for the generator"
wait "$gen_pid" || true
tail -n 3 "$out/gen-large.log"
if (( ${#high[@]} )); then
    say "$small orders, T = ${high[*]}"
    compare small-high.md --snapshot "$small_snap" --threads "${high[@]}" --reps "$reps_small"
fi
# The large day from the most threads down: the figures the issue lacks come first.
say "$large orders, T = $(echo "$threads" | tr ' ' '\n' | sort -rn | tr '\n' ' ')"
# shellcheck disable=SC2046
compare large.md --snapshot "$large_snap" --threads $(echo "$threads" | tr ' ' '\n' | sort -rn) --reps "$reps_large"
say "done"
