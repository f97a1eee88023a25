#!/bin/sh
# run.sh BIN WORKFLOW INPUT CONCURRENCY: one `jetpool run` on a fresh embedded store
# (docs/performance.md, issue 52). Time it with /usr/bin/time -v, alternating two binaries.
d=$(mktemp -d)
JETPOOL_DATA_DIR=$d JETPOOL_LOG_LEVEL=warn "$1" run "$2" --input "$3" --concurrency "$4" \
  --no-progress --no-preflight >/dev/null
rc=$?
rm -rf "$d"
exit $rc
