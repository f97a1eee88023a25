#!/bin/sh
# S2 compression of JETPOOL_RESULTS and JETPOOL_DLQ, measured: the store's
# size on disk and the dispatch and work rates, without it and with it, on
# the embedded server. docs/operations.md ("Retention") has a run's figures.
#
#   bench/compression.sh [RECORDS] [ROUNDS]      (from the repository root)
#
# Records are about 1 KiB of English words (text compresses; random bytes
# would not); the workflow echoes each one (the sim's default reply), and 5 %
# of the records die with "invalid api key", so the DLQ has some too.
set -eu
n=${1:-100000}
rounds=${2:-1}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
go build -o "$dir/jetpool" ./cmd/jetpool
awk -v n="$n" 'BEGIN {
  nw = split("the of and to in a is that for it as was with be by on not he this are or his from at which but have an they you were her she there been one all we their has would when if so no out what up said about into than them can only other new some time could these two may first then do any like my now over such our man me even most made after also did many before must through back years where much your way well down should because each just those people how too little state good very make world still own see men work long get here between both life being under never day same another know while last might us great old year off come since against go came right used take three", w, " ")
  srand(7)
  for (i = 1; i <= n; i++) {
    s = ""
    while (length(s) < 1000) s = s w[int(rand() * nw) + 1] " "
    printf "{\"id\":\"r%d\",\"text\":\"%s\"}\n", i, s
  }
}' > "$dir/records.jsonl"
cat > "$dir/workflow.yaml" <<'EOF'
name: compression
providers:
  sim: {kind: sim, sim: {seed: 1, faults: {auth: 0.05}}}
defaults: {provider: sim}
actions:
  - name: echo
    prompt: "{{ .text }}"
EOF
kib() { du -sk "$1" | cut -f1; }
# timed FILE CMD...: runs CMD, writes "wall user sys" (seconds) to FILE.
timed() { out=$1; shift; /usr/bin/time -f '%e %U %S' -o "$out" "$@" >/dev/null 2>&1; }
# rate N FILE: records/s and CPU µs a record of a timed run.
rate() { awk -v n="$1" '{ printf "%9.0f %8.0f", n / $1, ($2 + $3) * 1e6 / n }' "$2"; }
echo "rec/s is wall time, so it moves with the machine's load; CPU µs/rec is the process's user + system time."
printf '%-11s %5s %9s %8s %9s %8s %10s %12s %9s\n' compression round "dispatch" "CPU" "run" "CPU" "WORK KiB" "RESULTS KiB" "DLQ KiB"
printf '%-11s %5s %9s %8s %9s %8s\n' "" "" "rec/s" "µs/rec" "rec/s" "µs/rec"
r=1
while [ "$r" -le "$rounds" ]; do
  for c in none s2; do
    export JETPOOL_DATA_DIR="$dir/$c-$r" JETPOOL_COMPRESSION="$c" JETPOOL_LOG_LEVEL=error JETPOOL_NATS_URL=
    timed "$dir/d" "$dir/jetpool" dispatch "$dir/workflow.yaml" --input "$dir/records.jsonl" --job m --no-preflight
    work=$(kib "$JETPOOL_DATA_DIR"/jetstream/jetstream/*/streams/JETPOOL_WORK)
    timed "$dir/w" "$dir/jetpool" run "$dir/workflow.yaml" --input "$dir/records.jsonl" --job m --no-preflight --no-progress
    s="$JETPOOL_DATA_DIR"/jetstream/jetstream/*/streams
    printf '%-11s %5d %s %s %10d %12d %9d\n' "$c" "$r" "$(rate "$n" "$dir/d")" "$(rate "$n" "$dir/w")" \
      "$work" "$(kib $s/JETPOOL_RESULTS)" "$(kib $s/JETPOOL_DLQ)"
    rm -rf "$JETPOOL_DATA_DIR"
  done
  r=$((r + 1))
done
