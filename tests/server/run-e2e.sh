#!/usr/bin/env bash
# End-to-end tests of the server (ctest "server_e2e"): starts `hearth serve` on a random-weight
# qwen3 with the real Qwen3 tokenizer, the scripted-model server (hearth_test_serve), and the
# committed Qwen3.5 hybrid model (models/default) with and without the prompt cache, then
# runs the Node tests (official openai, @anthropic-ai/sdk and ollama clients, playwright-core
# driving Debian's chromium, the pi and Qwen Code coding agents against a scripted server of their
# own) and checks that SIGTERM stops a server with a generation in flight.
# usage: tests/server/run-e2e.sh BUILD_DIR
set -euo pipefail
BUILD=$(cd "${1:?usage: run-e2e.sh BUILD_DIR}" && pwd)
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
"$ROOT/scripts/fetch-test-assets.sh"
DEPS="$ROOT/.cache/server-tests"
[ -d "$DEPS/node_modules/openai" ] || { echo "server_e2e: $DEPS/node_modules is missing (npm ci failed?)"; exit 1; }
[ -x "${CHROMIUM:-/usr/bin/chromium}" ] || { echo "server_e2e: chromium is missing (apt-get install chromium)"; exit 1; }
cp "$ROOT"/tests/server/e2e/*.mjs "$DEPS/"

WORK=$(mktemp -d)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$WORK"; }
trap cleanup EXIT

# Starts a server in the background; sets URL from its "ready at URL" line.
start() {
  local log=$1; shift
  "$@" >"$log" 2>"$log.err" &
  PIDS+=($!)
  LAST_PID=$!
  for _ in $(seq 600); do
    URL=$(grep -o 'ready at http://[^ ]*' "$log" 2>/dev/null | head -1 | cut -d' ' -f3 || true)
    [ -n "$URL" ] && return 0
    kill -0 "$LAST_PID" 2>/dev/null || { cat "$log.err"; echo "server_e2e: $1 exited"; exit 1; }
    sleep 0.1
  done
  echo "server_e2e: $1 did not become ready"; cat "$log.err"; exit 1
}

"$BUILD/hearth_test_serve" make-model "$WORK/qwen3-random"
start "$WORK/model.log" "$BUILD/hearth" serve -m "$WORK/qwen3-random" --port 0 --ctx 2048 --cache-ram 512 --max-body 1000000 -t 2
export HEARTH_URL=$URL
start "$WORK/scripted.log" "$BUILD/hearth_test_serve" scripted --port 0 --api-key test-key
export HEARTH_SCRIPTED_URL=$URL HEARTH_KEY=test-key
start "$WORK/hybrid.log" "$BUILD/hearth" serve -m "$ROOT/models/default" --port 0 -t 2
export HEARTH_HYBRID_URL=$URL
start "$WORK/hybrid-nocache.log" "$BUILD/hearth" serve -m "$ROOT/models/default" --port 0 -t 2 --cache-ram 0
export HEARTH_HYBRID_NOCACHE_URL=$URL

# The hardened configuration: CORS for one origin, a 2 s idle timeout, the key from a file.
echo "hard-key-$RANDOM" > "$WORK/key"
start "$WORK/hard.log" "$BUILD/hearth" serve -m "$WORK/qwen3-random" --port 0 --ctx 2048 -t 2 \
  --cors-origin http://app.example --idle-timeout 2 --api-key-file "$WORK/key" --max-prompt-tokens 256
export HEARTH_HARDENED_URL=$URL HEARTH_HARDENED_KEY=$(cat "$WORK/key")

# Two models in one server, at most one loaded at a time (models load when a request names them).
start "$WORK/multi.log" "$BUILD/hearth" serve -m "$WORK/qwen3-random" -m "$ROOT/models/default" \
  --max-loaded 1 --port 0 --ctx 2048 -t 2
export HEARTH_MULTI_URL=$URL

# Its own server for the memory test, so that no other test's requests move the figures.
start "$WORK/memory.log" "$BUILD/hearth" serve -m "$WORK/qwen3-random" --port 0 --ctx 2048 -t 2
export HEARTH_MEMORY_URL=$URL HEARTH_MEMORY_PID=$LAST_PID

# The port is held exclusively: a second server on it fails and says why.
PORT=${HEARTH_URL##*:}
if "$BUILD/hearth" serve -m "$WORK/qwen3-random" --port "$PORT" -t 1 >"$WORK/second.log" 2>&1; then
  echo "server_e2e: a second server started on the busy port $PORT"; exit 1
fi
grep -q "port is in use" "$WORK/second.log" || { echo "server_e2e: no clear error for a busy port"; cat "$WORK/second.log"; exit 1; }
# HEARTH_API_KEY is honoured; listening beyond loopback without a key warns.
HEARTH_API_KEY=env-key start "$WORK/envkey.log" "$BUILD/hearth" serve -m "$WORK/qwen3-random" --port 0 -t 1
[ "$(curl -s -o /dev/null -w '%{http_code}' "$URL/v1/models")" = 401 ] || { echo "server_e2e: HEARTH_API_KEY not required"; exit 1; }
[ "$(curl -s -o /dev/null -w '%{http_code}' -H 'Authorization: Bearer env-key' "$URL/v1/models")" = 200 ] || { echo "server_e2e: HEARTH_API_KEY not accepted"; exit 1; }
kill "$LAST_PID"
start "$WORK/open.log" "$BUILD/hearth" serve -m "$WORK/qwen3-random" --host 0.0.0.0 --port 0 -t 1
grep -q "without an API key" "$WORK/open.log.err" || { echo "server_e2e: no warning for 0.0.0.0 without a key"; exit 1; }
kill "$LAST_PID"
echo "server_e2e: exclusive port, HEARTH_API_KEY and the open-listener warning: ok"

# HEAD is GET without the body: the head (status, Content-Length of the GET body), then nothing.
python3 - "$HEARTH_URL" <<'PY'
import socket, sys, urllib.parse
u = urllib.parse.urlparse(sys.argv[1])
for path, status in (("/", b"200"), ("/health", b"200"), ("/v1/chat/completions", b"405")):
    s = socket.create_connection((u.hostname, u.port))
    s.sendall(b"HEAD " + path.encode() + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    data = b""
    while chunk := s.recv(4096):
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 " + status), (path, head)
    assert body == b"", (path, body[:80])
    if status == b"200":
        assert b"Content-Length: " in head and b"Content-Length: 0\r" not in head, (path, head)
PY
echo "server_e2e: HEAD answers with the GET head and no body: ok"

# The agents' test starts its own scripted server (its scripts hold its temporary paths).
export HEARTH_BIN="$BUILD/hearth" HEARTH_TEST_SERVE="$BUILD/hearth_test_serve" HEARTH_ROOT="$ROOT"

cd "$DEPS"
node --test --test-concurrency=1 openai.test.mjs embeddings.test.mjs scripted.test.mjs responses.test.mjs \
  ollama.test.mjs multi.test.mjs hybrid.test.mjs browser.test.mjs hardening.test.mjs load.test.mjs memory.test.mjs \
  agents.test.mjs

# SIGTERM with a stream in flight: the client gets an end, the server exits 0, promptly.
curl -sN "$HEARTH_URL/v1/chat/completions" -H 'Content-Type: application/json' \
  -d '{"messages":[{"role":"user","content":"go"}],"max_tokens":1900,"ignore_eos":true,"stream":true}' >"$WORK/stream.txt" &
CURL=$!
sleep 1
kill -TERM "${PIDS[0]}"
for _ in $(seq 100); do kill -0 "${PIDS[0]}" 2>/dev/null || break; sleep 0.1; done
if kill -0 "${PIDS[0]}" 2>/dev/null; then echo "server_e2e: hearth serve did not stop within 10 s of SIGTERM"; exit 1; fi
wait "${PIDS[0]}" && rc=0 || rc=$?
[ "$rc" -eq 0 ] || { echo "server_e2e: hearth serve exited with $rc after SIGTERM"; exit 1; }
wait "$CURL" || true
grep -q '\[DONE\]' "$WORK/stream.txt" || { echo "server_e2e: the in-flight stream was not ended"; tail -c 300 "$WORK/stream.txt"; exit 1; }
echo "server_e2e: SIGTERM with a stream in flight: clean exit"
