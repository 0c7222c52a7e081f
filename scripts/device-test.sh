#!/usr/bin/env bash
# Configures, builds and tests hearth on the NVIDIA device machine (the team's entry there).
# That machine has CMake, Ninja, nvcc and a C++ compiler but not PCRE2/utf8proc/CLI11/nlohmann/fmt/
# gtest headers and cannot reach a registry, so they come as Debian packages fetched here by
# scripts/fetch-device-debs.sh into .device/debs/ and unpacked with `dpkg -x` into a private prefix
# (never into /). Typical use through the device tool:
#   scripts/fetch-device-debs.sh      # here, once
#   run(command="bash scripts/device-test.sh", carry=[".device"])
# Environment: BUILD (build dir, default build-device), PREFIX (default /tmp/hearth-prefix),
# JOBS, TARGETS (e.g. "hearth test_ops"), CTEST_ARGS (e.g. "-R ops"), HEARTH_CMAKE_ARGS (extra -D
# flags). Logs go to $OUT if set.
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD=${BUILD:-build-device}
PREFIX=${PREFIX:-/tmp/hearth-prefix}
JOBS=${JOBS:-$(nproc)}
LOGDIR=${OUT:-$BUILD/logs}
mkdir -p "$LOGDIR"

echo "== machine"
grep -h PRETTY_NAME /etc/os-release 2>/dev/null || true
uname -m
command -v nvidia-smi >/dev/null && nvidia-smi -L || echo "no nvidia-smi"
cmake --version | head -1
ninja --version
command -v nvcc >/dev/null && nvcc --version | tail -1 || echo "no nvcc"

# 1. carried Debian packages -> private prefix
CMAKE_PREFIX_ARGS=()
if compgen -G ".device/debs/*.deb" >/dev/null; then
  debs=(.device/debs/*.deb)
  echo "== unpacking ${#debs[@]} packages into $PREFIX"
  rm -rf "$PREFIX" && mkdir -p "$PREFIX"
  for f in "${debs[@]}"; do dpkg -x "$f" "$PREFIX"; done
  # pkg-config files name prefix=/usr; point them at the private prefix
  find "$PREFIX" -name '*.pc' -exec sed -i "s|=/usr|=$PREFIX/usr|g" {} +
  # dpkg -x keeps absolute symlinks (e.g. lib*.so -> /usr/lib/...): make them relative to the prefix
  while IFS= read -r link; do
    target=$(readlink "$link")
    case "$target" in
      /*) if [ -e "$PREFIX$target" ]; then ln -sfn "$PREFIX$target" "$link"
          elif [ ! -e "$target" ]; then  # e.g. libz.so -> /lib/.../libz.so.1.2.13: use the system soname
            soname=$(dirname "$target")/$(basename "$target" | sed -E 's/(\.so\.[0-9]+).*/\1/')
            if [ -e "$soname" ]; then ln -sfn "$soname" "$link"; fi
          fi ;;
    esac
  done < <(find "$PREFIX" -type l)
  MULTIARCH=$(gcc -print-multiarch 2>/dev/null || true); [ -n "$MULTIARCH" ] || MULTIARCH=x86_64-linux-gnu
  export PKG_CONFIG_PATH="$PREFIX/usr/lib/$MULTIARCH/pkgconfig:$PREFIX/usr/share/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
  export LD_LIBRARY_PATH="$PREFIX/usr/lib/$MULTIARCH${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export CPATH="$PREFIX/usr/include${CPATH:+:$CPATH}"
  CMAKE_PREFIX_ARGS=(-DCMAKE_PREFIX_PATH="$PREFIX/usr" -DCMAKE_LIBRARY_ARCHITECTURE="$MULTIARCH")
else
  echo "== no .device/debs (run scripts/fetch-device-debs.sh here and carry .device); using system packages"
fi

# 2. configure: CUDA on when the project has the switch; H200/H100 are sm_90
CUDA_ARGS=()
if grep -q 'HEARTH_CUDA' CMakeLists.txt && command -v nvcc >/dev/null; then
  CUDA_ARGS=(-DHEARTH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_CUDA_COMPILER="$(command -v nvcc)")
fi
echo "== configure ($BUILD)"
# shellcheck disable=SC2086
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DHEARTH_TESTS=ON -DHEARTH_BENCH=ON \
  "${CMAKE_PREFIX_ARGS[@]}" "${CUDA_ARGS[@]}" ${HEARTH_CMAKE_ARGS:-} 2>&1 | tee "$LOGDIR/configure.log"

# 3. build and test. TARGETS (space-separated) limits the build; a failing target does not stop
# the others (-k 0), so one engineer's unfinished file cannot hide everyone else's results.
echo "== build"
build_ok=1
# shellcheck disable=SC2086
cmake --build "$BUILD" -j "$JOBS" ${TARGETS:+--target $TARGETS} -- -k 0 2>&1 | tee "$LOGDIR/build.log" || build_ok=0
echo "== test"
set +e
# shellcheck disable=SC2086
(cd "$BUILD" && ctest --output-on-failure -j 1 ${CTEST_ARGS:-}) 2>&1 | tee "$LOGDIR/ctest.log"
set -e

# 4. summary (last, so it is what the device tool's output tail shows)
echo "== summary"
[ "$build_ok" = 1 ] && echo "build: ok" || echo "build: FAILED (see $LOGDIR/build.log; first errors below)"
[ "$build_ok" = 1 ] || grep -m 5 -E "error|FAILED" "$LOGDIR/build.log" || true
grep -E "tests passed|tests failed|\*\*\*Failed|\*\*\*Timeout|Not Run" "$LOGDIR/ctest.log" || true
grep -hE "^\[  (PASSED|FAILED|SKIPPED) " "$LOGDIR/ctest.log" | sort | uniq -c || true
