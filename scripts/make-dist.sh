#!/usr/bin/env bash
# Builds the release tarball dist/hearth-VERSION-linux-ARCH[-cuda].tar.gz: the hearth binary
# (chat page compiled in), the default model, the library and headers of the public API, and
# every shared library the binary needs except glibc's and the NVIDIA driver's, in lib/, found
# through an RPATH of $ORIGIN/../lib. Unpacked anywhere, bin/hearth runs on a Linux with glibc
# as new as the build machine's, with nothing else installed (scripts/check-dist.sh checks this
# in a bare Debian chroot). On a host with nvcc, the CUDA backend is included (the runtime and
# cuBLAS bundled; the driver is the host's).
# usage: scripts/make-dist.sh [extra cmake arguments, e.g. -DCMAKE_CUDA_ARCHITECTURES=80;90]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=build-dist
# DT_RPATH (--disable-new-dtags) rather than RUNPATH: it also applies to the bundled libraries'
# own dependencies (libcurl's, say), which RUNPATH would leave to the system's search path.
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DHEARTH_TESTS=OFF -DHEARTH_BENCH=OFF \
  '-DCMAKE_INSTALL_RPATH=$ORIGIN/../lib' -DCMAKE_EXE_LINKER_FLAGS=-Wl,--disable-new-dtags "$@" \
  > "$BUILD.log"
cmake --build "$BUILD" -j "$(nproc)" --target hearth hearth_lib hearth_server

version=$("$BUILD/hearth" --version | head -1 | cut -d' ' -f2)
suffix=""
"$BUILD/hearth" --version | grep -q "cuda" && suffix="-cuda"
name="hearth-$version-linux-$(uname -m)$suffix"
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
root="$stage/$name"
cmake --install "$BUILD" --prefix "$root" > /dev/null
mkdir -p "$root/lib"
# ldd lists the whole dependency tree; glibc's own libraries and the loader must be the host's,
# and libcuda is the driver's.
ldd "$root/bin/hearth" | awk '/=> \//{print $3}' | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so.* | libm.so.* | libpthread.so.* | libdl.so.* | librt.so.* | libresolv.so.* | \
      ld-linux*.so.* | libcuda.so.*) ;;
    *) cp -L "$lib" "$root/lib/" ;;
  esac
done
cp README.md "$root/"
mkdir -p dist
tar -C "$stage" -czf "dist/$name.tar.gz" "$name"
echo "dist/$name.tar.gz ($(du -h "dist/$name.tar.gz" | cut -f1))"
