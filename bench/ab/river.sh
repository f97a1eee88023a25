#!/bin/bash
# river.sh BIN N [ROUNDS]: jetpool against River (Postgres), both stores syncing every
# write, as operators deploy them (docs/performance.md, "synced stores against River").
# Rounds A B A B: in each, jetpool then River, each on a fresh server and store; round 0
# is a warm-up, rounds 1..ROUNDS (default 3) are counted. N records of 1 KiB
# ({"id":"rI","text":"x"×1000}), the same file for both.
#
# jetpool (BIN): a fresh nats-server (PATH) with deploy/nats's JetStream block
# (sync_interval: always, its store limits) and deploy/nats/accounts.conf (its users and
# permissions), one node on loopback (no cluster block, so JETPOOL_REPLICAS stays 1), and
# jetpool's environment as deploy/compose sets it (JETPOOL_BATCH_WRITES=on, json logs at
# info, metrics served, `worker --drain 130s`). The topology is made first, untimed
# (`jetpool tenant budget`, as River's migration is). Enqueue: `jetpool dispatch` as the
# dispatcher user, timed as a process. Drain: `jetpool worker --concurrency 256 --job J`
# as the worker user, from its start until `riverab watch` sees N results in
# JETPOOL_RESULTS (a stream info every 20 ms), then SIGTERM.
#
# River: a fresh Postgres cluster (Debian's postgresql, initdb defaults: fsync on,
# synchronous_commit on) on loopback, River's schema migrated untimed. Enqueue:
# `riverab enqueue`, InsertMany in batches of RIVER_BATCH (1000). Drain: `riverab drain`,
# a client with MaxWorkers 256 whose Work returns nil, until N completions, whole process;
# River's defaults otherwise (FetchCooldown 100ms; RIVER_COOLDOWN=10ms sets another).
#
# Prints one line a run (wall, the client's CPU from /usr/bin/time, the server's CPU in
# the phase from /proc, load average at its start and end) and then medians and the
# per-round ratios (jetpool's rate ÷ River's). The raw lines go to $OUT (default
# /tmp/river-ab.tsv). Needs: nats-server, python3, postgresql (apt-get install -y
# postgresql), run as root (Postgres runs as the postgres user via setpriv). Which
# writes each side syncs, and how many: bench/ab/syncs.sh.
# RIVERAB: a built bench/ab/river (default: built into the temp dir). KEEP=1 keeps each
# run's logs and times (not its store) under the temp dir, which it names.
#   go build -o jp ./cmd/jetpool
#   PATH=$(go env GOPATH)/bin:$PATH bench/ab/river.sh ./jp 20000 3
set -u
BIN=$(realpath "$1"); N=$2; ROUNDS=${3:-3}
HERE=$(cd "$(dirname "$0")" && pwd); ROOT=$(cd "$HERE/../.." && pwd)
RIVER_BATCH=${RIVER_BATCH:-1000}
OUT=${OUT:-/tmp/river-ab.tsv}
PGBIN=${PGBIN:-$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)}
WORK=$(mktemp -d); chmod 755 "$WORK"
LIVE=""   # the server of the run under way, stopped if the script ends early
trap '[ -n "$LIVE" ] && kill $LIVE 2>/dev/null; [ -n "${KEEP:-}" ] || rm -rf "$WORK"' EXIT
[ -n "${KEEP:-}" ] && echo "# KEEP: each run's logs stay under $WORK"
RIVERAB=${RIVERAB:-$WORK/riverab}
[ -x "$RIVERAB" ] || (cd "$HERE/river" && go build -o "$RIVERAB" .) || exit 1
TF="%e %U %S"   # /usr/bin/time: wall, user, system

freeport() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
load1() { cut -d' ' -f1 /proc/loadavg; }
# cpu PID...: seconds of CPU of the processes and of their children they reaped.
cpu() { local t=0 p; for p in "$@"; do
  [ -r /proc/$p/stat ] && t=$((t + $(awk '{print $14+$15+$16+$17}' /proc/$p/stat))); done
  echo "$t" | awk -v hz="$(getconf CLK_TCK)" '{printf "%.2f", $1/hz}'; }
# pgtree PM: the postmaster and its live children.
pgtree() { echo "$1" $(pgrep -P "$1"); }
# pgsettle PM K: wait (up to 2 s) until the postmaster has K children again, so that
# the backends of a client that exited are reaped and counted in its children's CPU.
pgsettle() { local i=0; while [ "$(pgrep -c -P "$1")" -gt "$2" ] && [ $i -lt 40 ]; do i=$((i+1)); sleep 0.05; done; }
# delta A B: B - A.
delta() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.2f", b-a}'; }

INPUT=$WORK/in.jsonl
python3 -c "
import sys
x='x'*1000
with open('$INPUT','w') as f:
    for i in range($N): f.write('{\"id\":\"r%d\",\"text\":\"%s\"}\n' % (i, x))"
printf 'providers:\n  sim: {kind: sim, sim: {latency: 0s, seed: 1}}\nactions:\n  - {name: act, provider: sim, model: sim, prompt: "do {{ .text }}", retry: true}\n' >"$WORK/wf.yaml"
PW=p$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')
for v in ACME_DISPATCHER ACME_WORKER ACME_VIEWER ACME_OPERATOR GLOBEX_DISPATCHER GLOBEX_WORKER \
  GLOBEX_VIEWER GLOBEX_OPERATOR SYS; do export NATS_${v}_PASSWORD=$PW; done

# jetpool_run ROUND: one run of jetpool; appends its line to $OUT.
jetpool_run() {
  local d; d=$(mktemp -d -p "$WORK"); local port; port=$(freeport)
  cp "$ROOT/deploy/nats/accounts.conf" "$d/"
  # deploy/nats/common.conf's jetstream block, this node alone on loopback
  cat >"$d/ns.conf" <<EOF
server_name: bench
listen: 127.0.0.1:$port
jetstream {
  store_dir: "$d/store"
  max_memory_store: 256MB
  max_file_store: 20GB
  sync_interval: always
}
include ./accounts.conf
EOF
  /usr/bin/time -f "$TF" -o "$d/ns.time" nats-server -c "$d/ns.conf" >"$d/ns.log" 2>&1 &
  local tpid=$!; local i=0
  until grep -qs "Server is ready" "$d/ns.log" || [ $i -gt 200 ]; do i=$((i+1)); sleep 0.05; done
  local ns; ns=$(pgrep -P $tpid); LIVE=$ns
  export JETPOOL_NATS_URL=nats://127.0.0.1:$port JETPOOL_BATCH_WRITES=on \
    JETPOOL_LOG_FORMAT=json JETPOOL_LOG_LEVEL=info JETPOOL_NATS_PASSWORD=$PW
  JETPOOL_NATS_USER=acme-operator "$BIN" tenant budget >/dev/null 2>"$d/setup.err" || { cat "$d/setup.err"; return 1; }
  local l0 c0 c1 c2 job; l0=$(load1); c0=$(cpu $ns)
  job=$(JETPOOL_NATS_USER=acme-dispatcher /usr/bin/time -f "$TF" -o "$d/enq.time" \
    "$BIN" dispatch "$WORK/wf.yaml" --input "$INPUT" --no-preflight 2>"$d/dispatch.err" | tail -1)
  c1=$(cpu $ns)
  [ -n "$job" ] || { cat "$d/dispatch.err"; return 1; }
  JETPOOL_NATS_USER=acme-worker JETPOOL_METRICS_ADDR=127.0.0.1:$(freeport) \
    /usr/bin/time -f "$TF" -o "$d/work.time" "$BIN" worker --drain 130s --concurrency 256 \
    --job "$job" 2>"$d/worker.log" &
  local w=$!
  /usr/bin/time -f "$TF" -o "$d/drain.time" "$RIVERAB" watch -url "$JETPOOL_NATS_URL" \
    -user acme-viewer -password "$PW" -n "$N" >/dev/null 2>"$d/watch.err" || { pkill -TERM -P $w; return 1; }
  c2=$(cpu $ns); [ -s "$d/watch.err" ] && sed "s/^/# round $1 jetpool: /" "$d/watch.err"
  local l1; l1=$(load1)
  pkill -TERM -P $w; wait $w
  kill -TERM "$ns"; wait $tpid; LIVE=""
  read -r ew eu es < <(tail -1 "$d/enq.time"); read -r dw _ _ < <(tail -1 "$d/drain.time")
  read -r _ wu ws < <(tail -1 "$d/work.time")  # after "exited with non-zero status"
  printf 'jetpool\t%s\t%s\t%s\t%.2f\t%s\t%s\t%.2f\t%s\t%s-%s\n' "$1" "$N" "$ew" "$(echo "$eu $es" | awk '{print $1+$2}')" \
    "$(delta "$c0" "$c1")" "$dw" "$(echo "$wu $ws" | awk '{print $1+$2}')" "$(delta "$c1" "$c2")" "$l0" "$l1" | tee -a "$OUT"
  unset JETPOOL_NATS_URL
  [ -n "${KEEP:-}" ] && rm -rf "$d/store" || rm -rf "$d"
}

# river_run ROUND: one run of River; appends its line to $OUT.
river_run() {
  local d; d=$(mktemp -d -p "$WORK"); chown postgres "$d"; local port; port=$(freeport)
  setpriv --reuid=postgres --regid=postgres --clear-groups "$PGBIN/initdb" -D "$d/pg" -U postgres \
    --auth=trust >"$d/initdb.log" 2>&1 || { cat "$d/initdb.log"; return 1; }
  /usr/bin/time -f "$TF" -o "$d/pg.time" setpriv --reuid=postgres --regid=postgres --clear-groups \
    "$PGBIN/postgres" -D "$d/pg" -c listen_addresses=127.0.0.1 -p "$port" -k "$d" >"$d/pg.log" 2>&1 &
  local tpid=$!; local i=0
  until "$PGBIN/pg_isready" -q -h 127.0.0.1 -p "$port" || [ $i -gt 200 ]; do i=$((i+1)); sleep 0.05; done
  local pm; pm=$(head -1 "$d/pg/postmaster.pid"); LIVE=$pm
  local dsn="postgres://postgres@127.0.0.1:$port/postgres?sslmode=disable"
  "$RIVERAB" migrate -dsn "$dsn" || return 1
  sleep 0.5; local base; base=$(pgrep -c -P "$pm")
  local l0 c0 c1 c2; l0=$(load1); c0=$(cpu $(pgtree $pm))
  /usr/bin/time -f "$TF" -o "$d/enq.time" "$RIVERAB" enqueue -dsn "$dsn" -input "$INPUT" \
    -batch "$RIVER_BATCH" >/dev/null || return 1
  pgsettle "$pm" "$base"; c1=$(cpu $(pgtree $pm))
  /usr/bin/time -f "$TF" -o "$d/drain.time" "$RIVERAB" drain -dsn "$dsn" -n "$N" -workers 256 ${RIVER_COOLDOWN:+-fetch-cooldown $RIVER_COOLDOWN} >/dev/null || return 1
  pgsettle "$pm" "$base"; c2=$(cpu $(pgtree $pm))
  local l1; l1=$(load1)
  kill -INT "$pm"; wait $tpid; LIVE=""
  read -r ew eu es < <(tail -1 "$d/enq.time"); read -r dw du ds < <(tail -1 "$d/drain.time")
  printf 'river\t%s\t%s\t%s\t%.2f\t%s\t%s\t%.2f\t%s\t%s-%s\n' "$1" "$N" "$ew" "$(echo "$eu $es" | awk '{print $1+$2}')" \
    "$(delta "$c0" "$c1")" "$dw" "$(echo "$du $ds" | awk '{print $1+$2}')" "$(delta "$c1" "$c2")" "$l0" "$l1" | tee -a "$OUT"
  [ -n "${KEEP:-}" ] && rm -rf "$d/pg" || rm -rf "$d"
}

echo "# system round N enqueue_s enqueue_cpu enqueue_server_cpu drain_s drain_cpu drain_server_cpu load1" | tee -a "$OUT"
for r in $(seq 0 "$ROUNDS"); do
  jetpool_run "$r" || exit 1
  river_run "$r" || exit 1
done

python3 - "$OUT" "$N" "$ROUNDS" <<'PY'
import statistics, sys
path, n, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
rows = [l.split("\t") for l in open(path) if not l.startswith("#")]
rows = [r for r in rows if r[2] == n][-2 * (rounds + 1):]
runs = {(r[0], int(r[1])): r for r in rows}
def col(sys_, i): return [float(runs[(sys_, k)][i]) for k in range(1, rounds + 1)]
for name, i, cpu, scpu in (("enqueue", 3, 4, 5), ("drain", 6, 7, 8)):
    j, rv = col("jetpool", i), col("river", i)
    ratios = [b / a for a, b in zip(j, rv)]
    print("%s N=%s: jetpool %.2f s (%.0f/s, client cpu %.2f s, server cpu %.2f s), "
          "River %.2f s (%.0f/s, client cpu %.2f s, server cpu %.2f s); jetpool/River rate "
          "per round %s, median %.2f" % (
        name, n, statistics.median(j), int(n) / statistics.median(j),
        statistics.median(col("jetpool", cpu)), statistics.median(col("jetpool", scpu)),
        statistics.median(rv), int(n) / statistics.median(rv),
        statistics.median(col("river", cpu)), statistics.median(col("river", scpu)),
        " ".join("%.2f" % x for x in ratios), statistics.median(ratios)))
PY
