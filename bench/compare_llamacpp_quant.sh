#!/usr/bin/env bash
# Side-by-side CPU benchmark of 4-bit weights: hearth on MLX-affine copies (4 bits, groups 32 and
# 64, `hearth quantize`) and llama.cpp (prebuilt, from npm) on Q4_0 and Q4_K_M copies of the same
# random bf16 checkpoint, alternating engines within each round. Writes nothing to the repository.
#   bench/compare_llamacpp_quant.sh PRESET [THREADS] [ROUNDS] [PP] [TG] [REPS]
# Models are cached in $HEARTH_PEERS_DIR (default ~/.cache/hearth-peers/models); llama.cpp's
# quantizer is built once from bench/llamacpp_quantize.c against node-llama-cpp's libllama, with
# the headers of the llama.cpp source that the npm package ships (llama/gitRelease.bundle).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
peers=${PEERS:-$here/../shared/peers}
preset=${1:?preset}; threads=${2:-$(nproc)}; rounds=${3:-2}; pp=${4:-512}; tg=${5:-128}; reps=${6:-3}
hearth=${HEARTH:-$here/build/hearth}
work=${PEERS_DIR:-$HOME/.cache/hearth-peers}
models=${HEARTH_PEERS_DIR:-$work/models}
mkdir -p "$models"
py=python3; python3 -c "import numpy" 2>/dev/null || py=/usr/bin/python3
bash "$peers/setup.sh" >/dev/null
base=$models/$preset
[ -f "$base/config.json" ] || $py "$peers/make_random_model.py" "$preset" "$base"
[ -f "$base-bf16.gguf" ] || $py "$peers/hf_to_gguf.py" "$base" "$base-bf16.gguf" --type bf16

# llama.cpp's quantizer against the prebuilt library.
libs=$work/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64
quantize=$work/llamacpp_quantize
if [ ! -x "$quantize" ] || [ "$here/bench/llamacpp_quantize.c" -nt "$quantize" ]; then
  src=$work/llama.cpp-src
  [ -d "$src" ] || git clone -q "$work/node_modules/node-llama-cpp/llama/gitRelease.bundle" "$src"
  cc -O2 -I"$src/include" -I"$src/ggml/include" "$here/bench/llamacpp_quantize.c" -o "$quantize" \
    -L"$libs" -l:libllama.v0.5.0.so -l:libggml.v0.5.0.so -l:libggml-base.so -Wl,-rpath,"$libs"
fi
for type in q4_0 q4_k_m; do
  [ -f "$base-$type.gguf" ] || "$quantize" "$base-bf16.gguf" "$base-$type.gguf" "$type" "$threads" >/dev/null 2>&1
done
for g in 32 64; do
  [ -f "$base-affine4-g$g/config.json" ] ||
    "$hearth" quantize -m "$base" -o "$base-affine4-g$g" --format affine --bits 4 --group-size "$g" >/dev/null 2>&1
done

for round in $(seq "$rounds"); do
  echo "== round $round, load: $(cut -d' ' -f1-3 /proc/loadavg) =="
  for g in 32 64; do
    echo "-- hearth affine 4-bit g$g ($(git -C "$here" rev-parse --short HEAD))"
    "$hearth" bench -m "$base-affine4-g$g" -p "$pp" -n "$tg" -r "$reps" -t "$threads" --no-mmap | grep -E '^\|'
  done
  for type in q4_0 q4_k_m; do
    echo "-- llama.cpp $type (node-llama-cpp 3.22.1, prebuilt CPU)"
    node "$work/llamacpp_bench.mjs" "$base-$type.gguf" --pp "$pp" --tg "$tg" --reps "$reps" --threads "$threads" | grep -E 'pp|tg'
  done
done
