#!/usr/bin/env bash
# What a change of the SQL costs `run`: two builds side by side on one generated day,
# alternating (old, new, old, new, ...) so that the machine's drift falls on both alike;
# min / median / max of the wall time each. Used for DESIGN §10.1 (UNREVERSED_EFFECT must
# cost at most 5% of `run` on the 1M-order day): OLD is the build before the class, NEW the
# build with it, each with its own embedded default rules (NEW's reverse on void).
#
#   benches/class_cost.sh OLD_BINARY NEW_BINARY [ORDERS] [ROUNDS]
#
# NEW also runs once with OLD's rules (no reverse_on_void), which isolates the cost of the
# SQL's extra columns from that of the findings the class adds.
set -euo pipefail
old=$1 new=$2 orders=${3:-1000000} rounds=${4:-5}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$new" gen --out "$work/day" --orders "$orders" --seed 5 --incident >/dev/null
git -C "$(dirname "$0")/.." show 2ef8131:fixtures/rules.toml >"$work/old-rules.toml"

# Seconds of one `run` of BINARY [ARGS...] over the day.
once() {
    local bin=$1; shift
    local start end
    start=$(date +%s.%N)
    "$bin" run --snapshot "$work/day" --out "$work/out" --replace -q "$@" >/dev/null 2>&1 || [ $? -eq 1 ]
    end=$(date +%s.%N)
    echo "$end - $start" | bc
}

declare -a t_old t_new t_new_old_rules
"$new" run --snapshot "$work/day" --out "$work/out" --replace -q >/dev/null 2>&1 || true  # warm the page cache
for _ in $(seq 1 "$rounds"); do
    t_old+=("$(once "$old")")
    t_new_old_rules+=("$(once "$new" --rules "$work/old-rules.toml")")
    t_new+=("$(once "$new")")
done

stats() { # min median max of the arguments
    printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {printf "%.3f %.3f %.3f", a[1], a[int((NR+1)/2)], a[NR]}'
}
read -r omin omed omax <<<"$(stats "${t_old[@]}")"
read -r nmin nmed nmax <<<"$(stats "${t_new[@]}")"
read -r rmin rmed rmax <<<"$(stats "${t_new_old_rules[@]}")"
findings() { "$1" sql --run "$work/out/run=20261129T160000Z" --format csv -c "SELECT count(*) FROM discrepancies" 2>/dev/null | tail -1; }
printf '%-28s %8s %8s %8s\n' "build (rules)" min median max
printf '%-28s %8s %8s %8s\n' "old (old rules)" "$omin" "$omed" "$omax"
printf '%-28s %8s %8s %8s\n' "new (old rules)" "$rmin" "$rmed" "$rmax"
printf '%-28s %8s %8s %8s\n' "new (reverse on void)" "$nmin" "$nmed" "$nmax"
echo "ratio new/old (median): $(echo "scale=3; $nmed / $omed" | bc)   new with old rules / old: $(echo "scale=3; $rmed / $omed" | bc)"
echo "orders $orders, rounds $rounds, findings of the last run: $(findings "$new")"
