#!/usr/bin/env bash
# Benchmarks hearth on the NVIDIA device machine (after scripts/device-test.sh built it):
# writes random bf16 checkpoints of the shapes docs/PERFORMANCE.md reports into $MODELS (once
# per machine) and runs `hearth bench` on each. Environment:
#   SHAPES  which checkpoints (default "qwen3-0.6b qwen3-8b"; also "qwen3_5-9b", "qwen3_5-0.8b";
#           a suffix -affineB quantizes the shape with `hearth quantize --format affine --bits B`,
#           -trellisK writes it with random K-bit trellis codes: bench/make_random_trellis.py)
#   BENCH_ARGS  extra arguments (default "-p 512,2048 -n 128 -r 3")
#   BUILD (default build-device), MODELS (default /tmp/hearth-models)
#   GENERATE_ONLY=1  only write the checkpoints
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build-device}
MODELS=${MODELS:-/tmp/hearth-models}
SHAPES=${SHAPES:-"qwen3-0.6b qwen3-8b"}
BENCH_ARGS=${BENCH_ARGS:-"-p 512,2048 -n 128 -r 3"}
mkdir -p "$MODELS"

make_model() {  # shape -> directory
  local dir="$MODELS/$1"
  if [ ! -f "$dir/config.json" ]; then
    case "$1" in
      *-affine[2-8])
        local base
        base=$(make_model "${1%-affine*}") || return 1
        "$BUILD/hearth" quantize -m "$base" -o "$dir" --format affine --bits "${1##*-affine}" \
          --group-size 64 >&2 || return 1 ;;
      *-trellis[2-4])
        local base
        base=$(make_model "${1%-trellis*}") || return 1
        python3 bench/make_random_trellis.py "$base" "$dir" "${1##*-trellis}" >&2 || return 1 ;;
      qwen3-*) python3 bench/make_random_checkpoint.py "$1" "$dir" >&2 ;;
      qwen3_5-0.8b) python3 bench/make_random_qwen3_5.py dense "$dir" >&2 ;;
      qwen3_5-9b) python3 bench/make_random_qwen3_5.py 9b "$dir" >&2 ;;
      *) echo "unknown shape $1" >&2; return 1 ;;
    esac
  fi
  echo "$dir"
}

nvidia-smi --query-gpu=name,clocks.max.sm,memory.total,driver_version --format=csv,noheader
for shape in $SHAPES; do
  dir=$(make_model "$shape") || continue
  [ "${GENERATE_ONLY:-0}" = 1 ] && continue
  echo "== $shape ($(du -sh "$dir" | cut -f1))"
  # shellcheck disable=SC2086
  "$BUILD/hearth" bench -m "$dir" --device cuda $BENCH_ARGS
done
