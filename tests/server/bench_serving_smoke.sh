#!/usr/bin/env bash
# bench/bench_serving.py against a real `hearth serve` of the bundled model: both concurrency
# levels complete with no failed request, the table has a row per level, and each row has the
# engine's time to first token (hearth reports it in the usage chunk). Then
# bench/tokenizer_for_random.py gives a checkpoint of a larger vocabulary a word for every id.
# Usage: bench_serving_smoke.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
log=$(mktemp)
"$build/hearth" serve -m "$src/models/default" --port 0 -t 2 > "$log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; rm -f "$log"' EXIT
for _ in $(seq 100); do grep -q "ready at" "$log" && break; sleep 0.1; done
url=$(grep -o "ready at http://[^ ]*" "$log" | cut -d' ' -f3)
[ -n "$url" ] || { cat "$log"; exit 1; }
out=$(python3 "$src/bench/bench_serving.py" --url "$url" --concurrency 1,3 --input-len 40 \
  --output-len 12)
echo "$out"
[ "$(echo "$out" | grep -c '^| [13] |')" = 2 ]
# Columns 9 and 10: engine TTFT p50 and p99, numbers rather than nan.
[ "$(echo "$out" | grep '^| [13] |' | awk -F'|' '$10 + 0 > 0 && $11 + 0 > 0' | wc -l)" = 2 ]

# A tokenizer for a checkpoint of 8,200 ids: the bundled 8,192 tokens, then words by id.
dir=$(mktemp -d)
trap 'kill $pid 2>/dev/null; rm -f "$log"; rm -rf "$dir"' EXIT
echo '{"vocab_size": 8200}' > "$dir/config.json"
python3 "$src/bench/tokenizer_for_random.py" "$dir" "$src/models/default"
python3 - "$dir/tokenizer.json" <<'PY'
import json, sys
vocab = json.load(open(sys.argv[1]))["model"]["vocab"]
ids = sorted(vocab.values())
assert ids == list(range(8200)), (len(ids), ids[-3:])
assert vocab["\u0120w8199"] == 8199
PY
