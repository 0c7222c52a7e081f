#!/usr/bin/env bash
# Decode speed of two hearth builds (say, before and after a thread-pool change) at several
# thread counts and with a busy neighbour (one process spinning on a core), the two builds
# alternated within each round so that a machine whose load drifts affects both alike.
#   bench/compare_threads.sh HEARTH_A HEARTH_B MODEL_DIR [ROUNDS] [TG] [REPS]
# Prints one line per run: build, threads, neighbour (0/1), load average, tg t/s mean ± sd.
set -euo pipefail
a=${1:?hearth binary A}; b=${2:?hearth binary B}; model=${3:?model dir}
rounds=${4:-3}; tg=${5:-8}; reps=${6:-3}
one() {  # binary label threads neighbour
  local pid=""
  if [ "$4" = 1 ]; then
    sh -c 'while :; do :; done' &
    pid=$!
  fi
  local row
  row=$("$1" bench -m "$model" -p 0 -n "$tg" -r "$reps" -t "$3" 2>/dev/null | tail -1 |
        awk -F'|' '{print $8}')
  [ -n "$pid" ] && kill "$pid"
  echo "$2 t$3 neighbour$4 load$(cut -d' ' -f1 /proc/loadavg) $row"
}
for r in $(seq "$rounds"); do
  for cfg in "1 0" "2 0" "4 0" "8 0" "2 1"; do
    set -- $cfg
    if [ $((r % 2)) = 1 ]; then
      one "$a" A "$1" "$2"; one "$b" B "$1" "$2"
    else
      one "$b" B "$1" "$2"; one "$a" A "$1" "$2"
    fi
  done
done
