#!/usr/bin/env bash
# Runs a release tarball (scripts/make-dist.sh) in a bare Debian 12 chroot — debootstrap's
# minbase: no compiler, no -dev packages, none of hearth's libraries — to show that it needs
# nothing but glibc: `hearth --version`, a generation with the bundled default model from another
# directory, and `hearth serve` answering the chat page and /v1/models. The chroot is made once
# into .cache/dist-root (about 300 MB; needs root and a Debian mirror).
# usage: scripts/check-dist.sh dist/hearth-VERSION-linux-ARCH.tar.gz
set -euo pipefail
tarball=$(realpath "${1:?usage: check-dist.sh TARBALL}")
cd "$(dirname "$0")/.."
root=$PWD/.cache/dist-root
if [ ! -x "$root/bin/bash" ]; then
  scripts/install-deps.sh debootstrap
  rm -rf "$root"
  debootstrap --variant=minbase bookworm "$root" http://deb.debian.org/debian > .cache/debootstrap.log
fi
rm -rf "$root/opt/hearth"
mkdir -p "$root/opt/hearth"
tar -C "$root/opt/hearth" --strip-components=1 -xzf "$tarball"
mount -t proc proc "$root/proc"
trap 'umount "$root/proc"' EXIT

chroot "$root" /bin/bash -euo pipefail -c '
cd /tmp
hearth=/opt/hearth/bin/hearth
if ldd "$hearth" | grep "not found"; then echo "check-dist: a library is missing"; exit 1; fi
"$hearth" --version
out=$("$hearth" generate -p "Once upon a time" -n 16 --temperature 0 2>/dev/null)
[ -n "$out" ] || { echo "check-dist: generate printed nothing"; exit 1; }
echo "generate: $out"
"$hearth" serve --port 0 -t 1 > serve.out 2> serve.err &
pid=$!
trap "kill $pid 2>/dev/null || true" EXIT
port=""
for _ in $(seq 300); do
  port=$(grep -o "ready at http://127.0.0.1:[0-9]*" serve.out | cut -d: -f3 || true)
  [ -n "$port" ] && break
  kill -0 $pid 2>/dev/null || { cat serve.err; echo "check-dist: serve exited"; exit 1; }
  sleep 0.1
done
[ -n "$port" ] || { cat serve.err; echo "check-dist: serve never became ready"; exit 1; }
get() {  # HTTP/1.0 GET over bash /dev/tcp: the chroot has no curl
  exec 3<>"/dev/tcp/127.0.0.1/$port"
  printf "GET %s HTTP/1.0\r\nHost: localhost\r\n\r\n" "$1" >&3
  cat <&3
  exec 3<&-
}
get / | grep -q "<html" || { echo "check-dist: no chat page at /"; exit 1; }
get /v1/models | grep -q "\"object\":\"list\"" || { echo "check-dist: /v1/models failed"; exit 1; }
echo "serve: chat page and /v1/models answered"
'
echo "check-dist: $(basename "$tarball") runs in a bare Debian 12"
