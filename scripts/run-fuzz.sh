#!/usr/bin/env bash
# Runs the libFuzzer targets of a HEARTH_FUZZ build dir, one after another, each for a bounded time
# over its committed seed corpus (tests/fuzz/corpus/<target>, only read) plus what earlier runs in
# this build dir found (BUILD/fuzz/corpus/<target>, where new inputs go).
#   scripts/run-fuzz.sh BUILD SECONDS [TARGET...]      (no TARGET: every tests/fuzz/fuzz_*.cpp)
# A crash, sanitizer report, leak, broken invariant, input slower than FUZZ_TIMEOUT seconds or
# memory past FUZZ_RSS_MB stops that target and fails the run; the input is kept as
# BUILD/fuzz/artifacts/<target>/crash-* (or leak-, timeout-, oom-), the log as
# BUILD/fuzz/<target>.log. Reproduce with: BUILD/<target> BUILD/fuzz/artifacts/<target>/crash-...
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 2 ] || { echo "usage: $0 BUILD SECONDS [TARGET...]" >&2; exit 2; }
build=$1
seconds=$2
shift 2
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for src in tests/fuzz/fuzz_*.cpp; do targets+=("$(basename "$src" .cpp)"); done
fi
timeout_s=${FUZZ_TIMEOUT:-60}
rss_mb=${FUZZ_RSS_MB:-4096}

failed=()
for t in "${targets[@]}"; do
  bin=$build/$t
  if [ ! -x "$bin" ]; then
    echo "fuzz: $bin is not built (cmake --build $build --target $t)" >&2
    exit 2
  fi
  work=$build/fuzz/corpus/$t
  artifacts=$build/fuzz/artifacts/$t
  log=$build/fuzz/$t.log
  mkdir -p "$work" "$artifacts"
  args=(-max_total_time="$seconds" -timeout="$timeout_s" -rss_limit_mb="$rss_mb"
        -print_final_stats=1 -artifact_prefix="$artifacts/")
  [ -f "tests/fuzz/$t.dict" ] && args+=(-dict="tests/fuzz/$t.dict")
  start=$(date +%s)
  if ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=0 \
     UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
     "$bin" "${args[@]}" "$work" "tests/fuzz/corpus/$t" >"$log" 2>&1; then
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")
    cov=$(grep -oE 'cov: [0-9]+ ft: [0-9]+' "$log" | tail -1)
    echo "fuzz: $t ok: ${runs:-?} runs in $(($(date +%s) - start)) s" \
         "(${rate:-?} exec/s, ${cov:-no coverage line})"
  else
    echo "fuzz: $t FAILED (log: $log); the input is in $artifacts/:" >&2
    # libFuzzer's progress lines and its list of newly covered functions would bury the report.
    grep -v -e '^#[0-9]' -e 'NEW_FUNC' "$log" | tail -60 >&2
    failed+=("$t")
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: failing targets: ${failed[*]}" >&2
  exit 1
fi
