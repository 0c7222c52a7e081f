#!/usr/bin/env bash
# Serving figures on an NVIDIA GPU host (after scripts/device-test.sh built hearth there): for each
# shape, writes the random bf16 checkpoint (scripts/device-bench.sh), gives it a tokenizer with
# text for every id (bench/tokenizer_for_random.py, so each token streams as it is made), runs
# `hearth bench --parallel` (decode steps of B sequences), then starts `hearth serve` on it and
# runs bench/bench_serving.py against it at each concurrency level.
# These are the tables of docs/PERFORMANCE.md, "Many sequences at once". Environment:
#   SHAPES       default "qwen3-8b" (also "qwen3_5-9b", any shape device-bench.sh writes)
#   CONCURRENCY  default "256,128,64,32,8,1"; INPUT_LEN / OUTPUT_LEN default 1024 / 1024
#   PARALLEL     the --parallel levels of `hearth bench` (default "1,8,32,64,128,256"; "" skips it)
#   SERVE_ARGS / CLIENT_ARGS  extra `hearth serve` / bench_serving.py arguments
#   DEVICE (default cuda), BUILD (default build-device), MODELS
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build-device}
export BUILD MODELS=${MODELS:-/tmp/hearth-models}
SHAPES=${SHAPES:-qwen3-8b}
CONCURRENCY=${CONCURRENCY:-256,128,64,32,8,1}
PARALLEL=${PARALLEL-1,8,32,64,128,256}
DEVICE=${DEVICE:-cuda}

for shape in $SHAPES; do
  SHAPES=$shape GENERATE_ONLY=1 bash scripts/device-bench.sh > /dev/null || continue
  dir=$MODELS/$shape
  python3 bench/tokenizer_for_random.py "$dir" > /dev/null || continue
  if [ -n "$PARALLEL" ]; then
    echo "== $shape: decode steps of several sequences"
    "$BUILD/hearth" bench -m "$dir" --device "$DEVICE" -p 0 -n 64 -r 1 --parallel ${PARALLEL//,/ }
  fi
  echo "== $shape: serving ${INPUT_LEN:-1024} in / ${OUTPUT_LEN:-1024} out"
  log=$(mktemp)
  # shellcheck disable=SC2086
  "$BUILD/hearth" serve -m "$dir" --device "$DEVICE" --port 0 --parallel 256 ${SERVE_ARGS:-} > "$log" 2>&1 &
  pid=$!
  for _ in $(seq 600); do grep -q "ready at" "$log" && break; sleep 0.5; done
  url=$(grep -o "ready at http://[^ ]*" "$log" | cut -d' ' -f3)
  if [ -n "$url" ]; then
    # shellcheck disable=SC2086
    python3 bench/bench_serving.py --url "$url" --concurrency "$CONCURRENCY" \
      --input-len "${INPUT_LEN:-1024}" --output-len "${OUTPUT_LEN:-1024}" ${CLIENT_ARGS:-}
    python3 -c "import urllib.request,sys; print(''.join(l for l in urllib.request.urlopen(sys.argv[1] + '/metrics').read().decode().splitlines(True) if l.startswith(('hearth_preemptions_total', 'hearth_kv'))))" "$url"
  else
    echo "the server did not start:"; cat "$log"
  fi
  kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
  grep -iE "error" "$log" | tail -5
  rm -f "$log"
done
