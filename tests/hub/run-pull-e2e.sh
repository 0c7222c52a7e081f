#!/usr/bin/env bash
# End-to-end test of `hearth pull`, `hearth ls`, `hearth rm` and `-m ORG/NAME` (ctest "hub_pull")
# against tests/hub/mock_hub.py, a local mock of the Hub and its CDN (no network): a download
# resumed from a partial file and again after a cut connection, the cache layout and hashes, a
# second pull fetching nothing, gated repos and tokens (never sent to the CDN), 404s, a corrupt
# download refused, retries of a 503, the index choosing the shards, a mirror without the tree
# API, offline mode, the pulled models loading (info, generate, serve's model id), rm of one
# revision and of a whole repo.
# usage: tests/hub/run-pull-e2e.sh BUILD_DIR
set -euo pipefail
BUILD=$(cd "${1:?usage: run-pull-e2e.sh BUILD_DIR}" && pwd)
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
HEARTH="$BUILD/hearth"
MODEL="$ROOT/models/default"
WORK=$(mktemp -d)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$WORK"; }
trap cleanup EXIT
die() { echo "hub_pull: $*"; for f in "$WORK"/out "$WORK"/err; do [ -f "$f" ] && { echo "--- $f"; cat "$f"; }; done; exit 1; }

python3 "$ROOT/tests/hub/mock_hub.py" --model-dir "$MODEL" --port-file "$WORK/ports" \
  --log "$WORK/requests.log" 2>"$WORK/mock.err" &
PIDS+=($!)
for _ in $(seq 100); do [ -s "$WORK/ports" ] && break; sleep 0.1; done
[ -s "$WORK/ports" ] || { cat "$WORK/mock.err"; echo "hub_pull: the mock Hub did not start"; exit 1; }
read -r HUB_PORT _ <"$WORK/ports"

unset HF_TOKEN HF_TOKEN_PATH HF_HUB_CACHE HF_HUB_OFFLINE HEARTH_MODEL
export HF_ENDPOINT="http://127.0.0.1:$HUB_PORT" HF_HOME="$WORK/hf" HEARTH_LOG=error
CACHE="$HF_HOME/hub"
TINY="$CACHE/models--test-org--tiny"
control() { curl -sf "$HF_ENDPOINT/_control?$1" >/dev/null; }
# Runs hearth, expecting success (ok) or failure (ko); output in $WORK/out and $WORK/err.
ok() { "$HEARTH" "$@" >"$WORK/out" 2>"$WORK/err" || die "failed: hearth $*"; }
ko() { if "$HEARTH" "$@" >"$WORK/out" 2>"$WORK/err"; then die "succeeded but should fail: hearth $*"; fi; }
expect_err() { grep -q -- "$1" "$WORK/err" || die "stderr lacks '$1'"; }
file_requests() { grep -c -E '/resolve/|^cdn' "$WORK/requests.log" || true; }
commit_of() { curl -sf "$HF_ENDPOINT/api/models/$1/revision/$2" | python3 -c 'import json,sys; print(json.load(sys.stdin)["sha"])'; }

# 1. A resumed download: a partial blob from an earlier run (3 MB) is continued with a Range
#    request; the CDN then cuts the connection after 4 MB and the retry resumes from 7 MB.
SHA=$(sha256sum "$MODEL/model.safetensors" | cut -c1-64)
mkdir -p "$TINY/blobs"
head -c 3000000 "$MODEL/model.safetensors" >"$TINY/blobs/$SHA.incomplete"
control "set=cut_once&path=model.safetensors&n=4000000"
ok pull test-org/tiny
grep -q "^cdn GET /blob/$SHA?[^ ]* range=bytes=3000000- " "$WORK/requests.log" || die "the partial file was not resumed"
grep -q "^cdn GET /blob/$SHA?[^ ]* range=bytes=7000000- " "$WORK/requests.log" || die "the cut transfer was not resumed"
if grep -q '^cdn .* auth=1' "$WORK/requests.log"; then die "a request to the CDN carried Authorization"; fi

# The layout: refs/main, relative links into blobs/, contents and hashes as served.
MAIN=$(commit_of test-org/tiny main)
[ "$(cat "$TINY/refs/main")" = "$MAIN" ] || die "refs/main is not $MAIN"
SNAP="$TINY/snapshots/$MAIN"
[ "$(readlink "$SNAP/model.safetensors")" = "../../blobs/$SHA" ] || die "model.safetensors is not linked to blobs/$SHA"
[ "$(sha256sum "$TINY/blobs/$SHA" | cut -c1-64)" = "$SHA" ] || die "the blob's sha256 is wrong"
for f in config.json generation_config.json tokenizer.json tokenizer_config.json README.md; do
  [ -L "$SNAP/$f" ] || die "$f is not a link in the snapshot"
  case "$(readlink "$SNAP/$f")" in ../../blobs/*) ;; *) die "$f does not link into blobs/" ;; esac
  cmp -s "$SNAP/$f" "$MODEL/$f" || die "$f differs from the served file"
done
for f in pytorch_model.bin model.gguf onnx pytorch_model.bin.index.json; do
  [ ! -e "$SNAP/$f" ] || die "$f should not have been pulled"
done
for f in "$TINY"/blobs/*.incomplete; do [ ! -e "$f" ] || die "$f is left"; done
grep -q "test-org/tiny main -> ${MAIN:0:12}: 6 files" "$WORK/out" || die "unexpected summary"

# 2. A second pull fetches nothing.
before=$(file_requests)
ok pull test-org/tiny
[ "$(file_requests)" = "$before" ] || die "the second pull requested files"
grep -q "(0 fetched, 0 B downloaded)" "$WORK/out" || die "the second pull reports downloads"
echo "hub_pull: resume, layout, no second download: ok"

# 3. The pulled model loads by its id, offline.
ok info -m test-org/tiny
grep -q "model:          $SNAP" "$WORK/out" || die "info did not load the snapshot"
ok generate -m test-org/tiny -p "def" -n 3 --temperature 0 -t 1
ok tokenize -m test-org/tiny:main "hello"
"$HEARTH" serve -m test-org/tiny --port 0 -t 1 >"$WORK/serve.out" 2>"$WORK/serve.err" &
SERVE=$!
PIDS+=("$SERVE")
for _ in $(seq 300); do grep -q "ready at" "$WORK/serve.out" && break; sleep 0.1; done
grep -q "(model test-org/tiny," "$WORK/serve.out" || { cat "$WORK/serve.out" "$WORK/serve.err"; die "serve's model id is not test-org/tiny"; }
kill "$SERVE"
ko info -m test-org/absent
expect_err "hearth pull test-org/absent"
echo "hub_pull: -m ORG/NAME (info, generate, tokenize, serve): ok"

# 4. Gated: no token, a refused token, then HF_TOKEN and the token file.
ko pull test-org/gated
expect_err "gated" && expect_err "HF_TOKEN"
HF_TOKEN=hf_wrong ko pull test-org/gated
expect_err "token"
HF_TOKEN=hf_test_token ok pull test-org/gated
echo hf_test_token >"$HF_HOME/token"
ok pull test-org/gated
rm "$HF_HOME/token"
if grep -q '^cdn .* auth=1' "$WORK/requests.log"; then die "the token went to the CDN"; fi
echo "hub_pull: gated repo and tokens: ok"

# 5. Not found: repo, revision, file.
ko pull test-org/nope
expect_err "repository not found"
ko pull test-org/tiny:nosuch
expect_err "revision 'nosuch' not found"
control "set=missing&path=generation_config.json"
ko pull test-org/tiny:v1
expect_err "file 'generation_config.json' not found"
control "clear=1"
ko pull not-a-model-id
expect_err "not a Hugging Face model id"
echo "hub_pull: 401/404 errors: ok"

# 6. Corrupt bytes: the sha256 check fails, nothing is placed; then a clean pull (after a 503
#    that is retried) takes the indexed shards only and loads.
SHARDED="$CACHE/models--test-org--sharded"
control "set=corrupt&path=model-00002-of-00002.safetensors"
ko pull test-org/sharded -j 2
expect_err "sha256 mismatch"
control "clear=1"
SHARD2=$(curl -sf "$HF_ENDPOINT/api/models/test-org/sharded/tree/main?recursive=true&cursor=4" | python3 -c '
import json,sys; print([e["lfs"]["oid"] for e in json.load(sys.stdin) if e["path"]=="model-00002-of-00002.safetensors"][0])')
[ ! -e "$SHARDED/blobs/$SHARD2" ] || die "a corrupt blob was placed"
[ ! -e "$SHARDED/blobs/$SHARD2.incomplete" ] || die "the corrupt partial file was kept"
control "set=flaky_api&n=1"
ok pull test-org/sharded
expect_err "HTTP 503"
SNAP2="$SHARDED/snapshots/$(commit_of test-org/sharded main)"
[ ! -e "$SNAP2/consolidated.safetensors" ] || die "consolidated.safetensors (not in the index) was pulled"
for f in model.safetensors.index.json model-00001-of-00002.safetensors model-00002-of-00002.safetensors; do
  [ -e "$SNAP2/$f" ] || die "$f is missing from the sharded snapshot"
done
ok info -m test-org/sharded
echo "hub_pull: corrupt bytes refused, 503 retried, shards from the index: ok"

# 7. A mirror without the tree API: per-file HEADs give sizes and hashes.
control "set=notree"
ok pull test-org/tiny:v1
control "clear=1"
grep -q "^hub HEAD /test-org/tiny/resolve/" "$WORK/requests.log" || die "no HEAD requests without the tree API"
V1=$(commit_of test-org/tiny v1)
[ "$(cat "$TINY/refs/v1")" = "$V1" ] || die "refs/v1 is not $V1"
echo "hub_pull: HEAD metadata without the tree API: ok"

# 8. Offline: the cache answers, nothing is requested; an uncached model is an error.
before=$(wc -l <"$WORK/requests.log")
HF_HUB_OFFLINE=1 ok pull test-org/tiny
HF_HUB_OFFLINE=1 ko pull test-org/other
expect_err "HF_HUB_OFFLINE"
[ "$(wc -l <"$WORK/requests.log")" = "$before" ] || die "offline pulls made requests"
HF_ENDPOINT=http://127.0.0.1:1 ok pull test-org/sharded
expect_err "using the cached snapshot"
echo "hub_pull: offline and unreachable: ok"

# 9. ls, and rm of one revision (its own blob goes, shared blobs stay), then of whole repos.
ok ls
for want in "test-org/tiny .*main .*${MAIN:0:10}.*yes" "test-org/tiny .*v1 " "test-org/sharded .*main .*yes" "test-org/gated"; do
  grep -q -E "$want" "$WORK/out" || die "ls lacks '$want'"
done
V1_GEN=$(readlink "$TINY/snapshots/$V1/generation_config.json")
ok rm test-org/tiny:v1
[ ! -e "$TINY/snapshots/$V1" ] || die "rm left v1's snapshot"
[ ! -e "$TINY/refs/v1" ] || die "rm left refs/v1"
[ ! -e "$TINY/blobs/${V1_GEN##*/}" ] || die "rm left v1's own generation_config.json blob"
[ -e "$TINY/blobs/$SHA" ] || die "rm removed a blob main still uses"
ok info -m test-org/tiny
ok rm test-org/tiny
[ ! -e "$TINY" ] || die "rm left the repo folder"
ok ls --json
python3 -c 'import json,sys; m={r["model"] for r in json.load(open(sys.argv[1]))}; assert m == {"test-org/gated","test-org/sharded"}, m' "$WORK/out" \
  || die "ls --json lists the wrong models"
ko rm test-org/tiny
expect_err "not in the Hugging Face cache"
echo "hub_pull: ls and rm: ok"
