#!/usr/bin/env bash
# Side-by-side CPU benchmark: hearth and llama.cpp (prebuilt, from npm) on the same random-weight
# checkpoint, same threads and precision. Writes nothing to the repository.
#   bench/compare_llamacpp.sh PRESET [THREADS] [PP] [TG] [REPS]
# PRESET is one of ../shared/peers/make_random_model.py's presets (e.g. qwen3-0.6b).
# Models are cached in $HEARTH_PEERS_DIR (default /work/peers or ~/.cache/hearth-peers/models).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
peers=${PEERS:-$here/../shared/peers}
preset=${1:?preset}; threads=${2:-$(nproc)}; pp=${3:-512}; tg=${4:-128}; reps=${5:-3}
models=${HEARTH_PEERS_DIR:-$HOME/.cache/hearth-peers/models}
mkdir -p "$models"
py=python3; python3 -c "import numpy" 2>/dev/null || py=/usr/bin/python3
[ -f "$models/$preset/config.json" ] || $py "$peers/make_random_model.py" "$preset" "$models/$preset"
[ -f "$models/$preset-bf16.gguf" ] || $py "$peers/hf_to_gguf.py" "$models/$preset" "$models/$preset-bf16.gguf" --type bf16
bash "$peers/setup.sh" >/dev/null
echo "== hearth ($(git -C "$here" rev-parse --short HEAD)) =="
"$here/build/hearth" bench -m "$models/$preset" -p "$pp" -n "$tg" -r "$reps" -t "$threads"
echo "== llama.cpp (node-llama-cpp 3.22.1, prebuilt CPU) =="
node "${PEERS_DIR:-$HOME/.cache/hearth-peers}/llamacpp_bench.mjs" "$models/$preset-bf16.gguf" --pp "$pp" --tg "$tg" --reps "$reps" --threads "$threads"
