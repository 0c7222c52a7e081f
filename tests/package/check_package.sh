#!/usr/bin/env bash
# The installed package from a program's side: installs BUILD_DIR into a scratch prefix, builds
# examples/embed.cpp against it with CMake (find_package(hearth)) and with pkg-config, and runs
# both builds on the bundled default model. Usage: check_package.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" > "$work/install.log"
test -f "$work/prefix/include/hearth/hearth.h"
test -f "$work/prefix/lib/libhearth.a" || test -f "$work/prefix/lib64/libhearth.a"

cmake -S "$src/examples" -B "$work/cmake-build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$work/prefix" > "$work/configure.log"
cmake --build "$work/cmake-build" > "$work/build.log"

libdir=$(dirname "$(find "$work/prefix" -name hearth.pc | head -1)")
flags=$(PKG_CONFIG_PATH="$libdir${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}" pkg-config --cflags --libs hearth)
# shellcheck disable=SC2086
c++ -O1 "$src/examples/embed.cpp" -o "$work/embed-pc" $flags

for exe in "$work/cmake-build/embed" "$work/embed-pc"; do
  out=$("$exe" "$src/models/default" "Say hello." 2> "$work/stderr")
  grep -q "generated tokens" "$work/stderr" || { cat "$work/stderr"; exit 1; }
  [ -n "$out" ] || { echo "$exe printed no text"; exit 1; }
  # A bad model directory is a clear error and exit status 1, not a crash.
  if "$exe" "$work/no-such-model" "x" 2> "$work/err"; then echo "$exe accepted a missing model"; exit 1; fi
  grep -q "^hearth: " "$work/err" || { cat "$work/err"; exit 1; }
done
echo "package: CMake and pkg-config builds of examples/embed.cpp ran"
