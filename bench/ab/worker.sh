#!/bin/sh
# worker.sh BIN WORKFLOW INPUT CONCURRENCY: a `jetpool worker` process on its own
# against a fresh nats-server -js (its own store, loopback), the job dispatched before
# the worker starts. Prints the worker's peak RSS and CPU (/usr/bin/time) and the
# records per second (docs/performance.md). WORKER_ENV="K=V ..." is set for the worker alone.
d=$(mktemp -d)
port=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
printf 'listen: 127.0.0.1:%s\njetstream { store_dir: "%s/store" }\n' "$port" "$d" > "$d/ns.conf"
nats-server -c "$d/ns.conf" >"$d/ns.log" 2>&1 &
ns=$!
i=0; until grep -q "Server is ready" "$d/ns.log" || [ $i -gt 200 ]; do i=$((i+1)); sleep 0.05; done
export JETPOOL_NATS_URL=nats://127.0.0.1:$port JETPOOL_LOG_LEVEL=warn
job=$("$1" dispatch "$2" --input "$3" 2>"$d/dispatch.err" | tail -1)
n=$(wc -l < "$3")
/usr/bin/time -f "%M KiB peak, %U+%S s cpu, %e s wall" -o "$d/time" env $WORKER_ENV "$1" worker --concurrency "$4" --job "$job" 2>"$d/worker.log" &
w=$!
# Poll the job until every record is done, then stop the worker: the rate from
# the worker's start, and sustained (from 10 % to 90 % of the records done).
python3 - "$1" "$job" "$n" <<'PY'
import json, subprocess, sys, time
bin, job, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
t0, samples = time.time(), []
while True:
    out = subprocess.run([bin, "status", job, "--json"], capture_output=True, text=True).stdout
    try:
        j = json.loads(out); j = j[0] if isinstance(j, list) else j
        done = j.get("succeeded", 0) + j.get("failed", 0)
    except Exception:
        done = 0
    samples.append((time.time(), done))
    if done >= n:
        break
    time.sleep(0.2)
def at(frac):
    return next(t for t, d in samples if d >= frac * n)
print("records/s from the worker's start: %.0f; sustained (10-90%%): %.0f" % (
    n / (samples[-1][0] - t0), 0.8 * n / max(at(0.9) - at(0.1), 1e-9)))
PY
pkill -TERM -P $w; wait $w
cat "$d/time"
kill $ns; wait $ns 2>/dev/null
rm -rf "$d"
