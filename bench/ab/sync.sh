#!/bin/sh
# sync.sh BIN BATCH_WRITES WORKFLOW INPUT: one `jetpool run` (c256) on a fresh nats-server
# that syncs every write, as deploy/nats ships it; BATCH_WRITES "" leaves
# JETPOOL_BATCH_WRITES unset (auto: off on an external server). Prints the summary's
# elapsed line (docs/performance.md, issue 52).
d=$(mktemp -d)
port=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
printf 'listen: 127.0.0.1:%s\njetstream { store_dir: "%s/store", sync_interval: always }\n' "$port" "$d" > "$d/ns.conf"
nats-server -c "$d/ns.conf" >"$d/ns.log" 2>&1 &
ns=$!
i=0; until grep -q "Server is ready" "$d/ns.log" || [ $i -gt 200 ]; do i=$((i+1)); sleep 0.05; done
[ -n "$2" ] && export JETPOOL_BATCH_WRITES="$2"
JETPOOL_NATS_URL=nats://127.0.0.1:$port JETPOOL_LOG_LEVEL=warn "$1" run "$3" --input "$4" \
  --concurrency 256 --no-progress --no-preflight >"$d/out"
rc=$?
grep elapsed "$d/out"
kill $ns; wait $ns
rm -rf "$d"
exit $rc
