#!/usr/bin/env bash
# Downloads (here, on the development machine) the Debian -dev packages that the NVIDIA device
# machine lacks, into .device/debs/, for scripts/device-test.sh to unpack there with `dpkg -x`.
# The device machine cannot reach any package registry, so they travel with the working tree:
#   scripts/fetch-device-debs.sh            # once per machine; .device/ is git-ignored
#   run(command="bash scripts/device-test.sh", carry=[".device"])
# Always amd64 (the device is x86-64), whatever this machine is.
set -euo pipefail
cd "$(dirname "$0")/.."

DEST=.device/debs
# what hearth's CMakeLists needs (headers, CMake/pkg-config files, shared libraries), plus the
# libraries those -dev packages link to
PACKAGES=(
  libpcre2-dev libpcre2-8-0
  libutf8proc-dev libutf8proc2
  nlohmann-json3-dev
  libcli11-dev
  libfmt-dev libfmt9
  libgtest-dev
  libboost1.74-dev
)

# .device/ is ignored by .gitignore; keep it out of git also for checkouts without that line
if [ -d .git ] && ! grep -qx '/.device/' .git/info/exclude 2>/dev/null; then
  mkdir -p .git/info && echo '/.device/' >> .git/info/exclude
fi

LISTS=/tmp/hearth-apt-amd64
mkdir -p "$DEST" "$LISTS/partial"
APT_OPTS=(-o APT::Architecture=amd64 -o APT::Architectures=amd64 -o Dir::State::Lists="$LISTS")
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
$SUDO apt-get "${APT_OPTS[@]}" update -qq
rm -f "$DEST"/*.deb
(cd "$DEST" && apt-get "${APT_OPTS[@]}" download "${PACKAGES[@]}")
echo "downloaded into $DEST:"
ls -l "$DEST"
du -sh "$DEST"
