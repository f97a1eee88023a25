#!/bin/bash
# syncs.sh BIN N: which writes each store syncs, and how many, for an enqueue and a drain
# of N records of 1 KiB (docs/performance.md, "synced stores against River"). Not a timing:
# strace slows the server.
# jetpool: a fresh nats-server (sync_interval: always) under `strace -f --seccomp-bpf`,
# JETPOOL_BATCH_WRITES=on (BW=off to compare), `jetpool dispatch` then `jetpool worker
# --concurrency 256` until every result is stored; prints the server's fsyncs, O_SYNC opens
# and file removals per file (ids folded), and the bytes it handed to storage
# (/proc/PID/io). River: a fresh Postgres cluster, pg_stat_wal after the migration, the
# enqueue (InsertMany, 1000 a call) and the drain (bench/ab/river). Needs strace,
# nats-server, postgresql; run as root.
set -u
BIN=$(realpath "$1"); N=$2
HERE=$(cd "$(dirname "$0")" && pwd)
d=$(mktemp -d); chmod 755 "$d"; LIVE=""
trap '[ -n "$LIVE" ] && kill $LIVE 2>/dev/null; rm -rf "$d"' EXIT
RIVERAB=${RIVERAB:-$d/riverab}
[ -x "$RIVERAB" ] || (cd "$HERE/river" && go build -o "$RIVERAB" .) || exit 1
freeport() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
wb() { awk '/^write_bytes/ {print int($2/1048576)}' /proc/$1/io; }
# summary FROM TO: the trace's lines FROM..TO, counted by call and file
summary() { sed -n "$1,$2p" "$d/trace" | awk '
  match($0, /(fsync|fdatasync|openat|unlinkat|renameat)\(/) {
    call = substr($0, RSTART, RLENGTH - 1)
    if (call == "openat" && $0 !~ /O_SYNC/ && $0 !~ /O_CREAT/) next
    if ($0 ~ /O_SYNC/) call = "openat O_SYNC"; else if (call == "openat") call = "openat O_CREAT"
    p = $0; if (call ~ /fsync|fdatasync/) { sub(/^[^<]*</, "", p); sub(/>.*/, "", p) } else { sub(/^[^"]*"/, "", p); sub(/".*/, "", p) }
    sub(/.*\/streams\//, "", p); gsub(/batches\/[^\/]+/, "batches/ID", p); gsub(/[0-9]+\.blk/, "N.blk", p)
    gsub(/jetpool-[^\/]+/, "CONSUMER", p); print call, p }' | sort | uniq -c | sort -rn | head -20; }

python3 -c "
with open('$d/in.jsonl','w') as f:
    for i in range($N): f.write('{\"id\":\"r%d\",\"text\":\"%s\"}\n' % (i, 'x'*1000))"
printf 'providers:\n  sim: {kind: sim, sim: {latency: 0s, seed: 1}}\nactions:\n  - {name: act, provider: sim, model: sim, prompt: "do {{ .text }}", retry: true}\n' >"$d/wf.yaml"

port=$(freeport)
printf 'listen: 127.0.0.1:%s\njetstream { store_dir: "%s/store", sync_interval: always }\n' "$port" "$d" >"$d/ns.conf"
strace -f --seccomp-bpf -e trace=fsync,fdatasync,openat,unlinkat,renameat -y -o "$d/trace" \
  nats-server -c "$d/ns.conf" >"$d/ns.log" 2>&1 &
st=$!; i=0
until grep -qs "Server is ready" "$d/ns.log" || [ $i -gt 200 ]; do i=$((i+1)); sleep 0.05; done
ns=$(pgrep -P $st); LIVE=$ns
export JETPOOL_NATS_URL=nats://127.0.0.1:$port JETPOOL_BATCH_WRITES=${BW:-on} JETPOOL_LOG_LEVEL=warn
"$BIN" tenant budget >/dev/null
t0=$(wc -l <"$d/trace"); b0=$(wb $ns)
job=$("$BIN" dispatch "$d/wf.yaml" --input "$d/in.jsonl" --no-preflight | tail -1)
t1=$(wc -l <"$d/trace"); b1=$(wb $ns)
"$BIN" worker --concurrency 256 --job "$job" 2>/dev/null & w=$!
"$RIVERAB" watch -url "$JETPOOL_NATS_URL" -n "$N" >/dev/null
t2=$(wc -l <"$d/trace"); b2=$(wb $ns)
kill -TERM $w; wait $w
echo "== jetpool dispatch of $N: $((b1 - b0)) MiB to storage"; summary $((t0 + 1)) "$t1"
echo "== jetpool drain of $N: $((b2 - b1)) MiB to storage"; summary $((t1 + 1)) "$t2"
kill "$ns"; wait $st; LIVE=""; unset JETPOOL_NATS_URL

PG=${PGBIN:-$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)}
mkdir "$d/pgd"; chown postgres "$d/pgd"; port=$(freeport)
setpriv --reuid=postgres --regid=postgres --clear-groups "$PG/initdb" -D "$d/pgd/pg" -U postgres --auth=trust >/dev/null
setpriv --reuid=postgres --regid=postgres --clear-groups "$PG/postgres" -D "$d/pgd/pg" \
  -c listen_addresses=127.0.0.1 -p "$port" -k "$d/pgd" >"$d/pg.log" 2>&1 &
LIVE=$!; i=0
until "$PG/pg_isready" -q -h 127.0.0.1 -p "$port" || [ $i -gt 200 ]; do i=$((i+1)); sleep 0.05; done
dsn="postgres://postgres@127.0.0.1:$port/postgres?sslmode=disable"
wal() { "$PG/psql" -Atq "$dsn" -c "select 'WAL ' || pg_size_pretty(wal_bytes) || ', ' || wal_write || ' writes, ' || wal_sync || ' syncs' from pg_stat_wal"; }
"$RIVERAB" migrate -dsn "$dsn"
echo "== River (pg_stat_wal, cumulative): after the migration: $(wal)"
"$RIVERAB" enqueue -dsn "$dsn" -input "$d/in.jsonl" -batch 1000 >/dev/null
echo "after the enqueue of $N: $(wal)"
"$RIVERAB" drain -dsn "$dsn" -n "$N" >/dev/null
echo "after the drain: $(wal)"
kill -INT $LIVE; wait $LIVE; LIVE=""
