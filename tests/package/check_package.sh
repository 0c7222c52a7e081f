#!/usr/bin/env bash
# The installed package from a program's side: installs BUILD_DIR into a scratch prefix, checks
# that the installed hearth finds its default model from any directory, builds
# examples/embed.cpp and examples/serve.cpp against it with CMake (find_package(hearth)) and with
# pkg-config (hearth, hearth-server), and runs every build on the bundled default model: embed
# answers a prompt; serve answers /health, /v1/models, a chat completion and the chat page, then
# stops on SIGTERM with status 0. Usage: check_package.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
work=$(mktemp -d)
server_pid=""
cleanup() {
  if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
cmake --install "$build" --prefix "$work/prefix" > "$work/install.log"
test -f "$work/prefix/include/hearth/hearth.h"
test -f "$work/prefix/include/hearth/server.h"
libdir=$(dirname "$(find "$work/prefix" -name libhearth.a | head -1)")
test -f "$libdir/libhearth-server.a"

# The installed hearth, run from elsewhere without -m, finds the installed default model (not the
# source tree's), and names its commit.
info=$(cd "$work" && "$work/prefix/bin/hearth" info)
grep -q "^model: *$work/prefix/share/hearth/models/default" <<<"$info" || { echo "$info"; exit 1; }
"$work/prefix/bin/hearth" --version | grep -q "(commit " || { echo "no commit in --version"; exit 1; }

cmake -S "$src/examples" -B "$work/cmake-build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$work/prefix" > "$work/configure.log"
cmake --build "$work/cmake-build" > "$work/build.log"

pc() { PKG_CONFIG_PATH="$libdir/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}" pkg-config "$@"; }
# shellcheck disable=SC2046
c++ -O1 "$src/examples/embed.cpp" -o "$work/embed-pc" $(pc --cflags --libs hearth)
# shellcheck disable=SC2046
c++ -O1 "$src/examples/serve.cpp" -o "$work/serve-pc" $(pc --cflags --libs hearth-server)

for exe in "$work/cmake-build/embed" "$work/embed-pc"; do
  out=$("$exe" "$src/models/default" "Say hello." 2> "$work/stderr")
  grep -q "generated tokens" "$work/stderr" || { cat "$work/stderr"; exit 1; }
  [ -n "$out" ] || { echo "$exe printed no text"; exit 1; }
  # A bad model directory is a clear error and exit status 1, not a crash.
  if "$exe" "$work/no-such-model" "x" 2> "$work/err"; then echo "$exe accepted a missing model"; exit 1; fi
  grep -q "^hearth: " "$work/err" || { cat "$work/err"; exit 1; }
done

for exe in "$work/cmake-build/serve" "$work/serve-pc"; do
  "$exe" "$src/models/default" 0 > "$work/serve.out" 2> "$work/serve.err" &
  server_pid=$!
  url=""
  for _ in $(seq 600); do
    url=$(grep -o 'http://[^ ]*' "$work/serve.out" | head -1 || true)
    [ -n "$url" ] && break
    kill -0 "$server_pid" 2>/dev/null || { cat "$work/serve.err"; echo "$exe exited before serving"; exit 1; }
    sleep 0.1
  done
  [ -n "$url" ] || { cat "$work/serve.err"; echo "$exe printed no URL"; exit 1; }
  python3 - "$url" <<'PY'
import json, sys, urllib.request
url = sys.argv[1]
def call(path, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url + path, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.load(r)
health = call("/health")
assert health == {"status": "ok"}, health
models = call("/v1/models")
assert [m["id"] for m in models["data"]] == ["default"], models
reply = call("/v1/chat/completions", {"model": "default", "max_tokens": 8,
                                      "messages": [{"role": "user", "content": "Say hello."}]})
assert reply["choices"][0]["finish_reason"] in ("stop", "length"), reply
assert reply["usage"]["completion_tokens"] > 0, reply
# The chat page is compiled into the server library: served with no files beside the program.
with urllib.request.urlopen(url + "/", timeout=30) as r:
    page = r.read().decode()
assert "<html" in page and r.headers["Content-Type"].startswith("text/html"), page[:200]
with urllib.request.urlopen(url + "/app.js", timeout=30) as r:
    assert r.headers["Content-Type"].startswith("text/javascript"), r.headers
PY
  kill -TERM "$server_pid"
  status=0
  wait "$server_pid" || status=$?
  server_pid=""
  [ "$status" -eq 0 ] || { cat "$work/serve.err"; echo "$exe exited with $status on SIGTERM"; exit 1; }
  # A bad model directory is a clear error and exit status 1.
  if "$exe" "$work/no-such-model" 2> "$work/err"; then echo "$exe served a missing model"; exit 1; fi
  grep -q "^hearth: " "$work/err" || { cat "$work/err"; exit 1; }
done
echo "package: CMake and pkg-config builds of examples/embed.cpp and examples/serve.cpp ran"
