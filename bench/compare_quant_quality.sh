#!/usr/bin/env bash
# Quantization quality of hearth and llama.cpp on the same weights and the same tokens: the mean
# KL divergence of each quantized copy against the float model's next-token distributions, the
# top-1 agreement with it, and the perplexity, as llama-perplexity --kl-divergence-base reports.
#   bench/compare_quant_quality.sh MODEL_DIR TEXT [CALIB_TEXT]
# MODEL_DIR: a float (bf16) Hugging Face checkpoint; TEXT: held-out text (models/default/
# heldout.txt for the default model); CALIB_TEXT: text for `hearth quantize --calib` (LDLQ), which
# must be disjoint from TEXT (checked); without it the --calib rows are left out.
#
# 1. `hearth perplexity --kl-base BASE --save-logits` writes the float model's top-K log-probs per
#    scored position and the tokens it evaluated (src/runtime/kl_divergence.h).
# 2. hearth copies: affine 8 and 4 bits (group 64), trellis 2/3/4 bits plain, with --rotate, and
#    with --rotate --calib; the trellis rows are left out when trellis codes none of the layers'
#    linears (widths that are not multiples of 256), with hearth's notice.
# 3. llama.cpp copies: the float model as a bf16 GGUF (../shared/peers/hf_to_gguf.py: llama,
#    qwen2 and qwen3 only; BF16_GGUF=FILE supplies one made another way), then Q8_0, Q4_0, Q4_K_M,
#    Q3_K_M and Q2_K by llama.cpp's own quantizer (bench/llamacpp_quantize.c). Each is evaluated on
#    the base file's tokens by bench/llamacpp_kl.c, with hearth's KL formula; the bf16 GGUF's row is
#    the cross-engine sanity check (KL ~ 0). The types llama.cpp chose per tensor are summarized.
# Prints one table: bits per weight of the layers' linear weights (codes + scales + biases over
# the float model's weights of those tensors) and of the whole model (the bytes of every tensor
# in the output, embedding and head included, over the float model's parameter count; file
# headers and the GGUF's tokenizer metadata are not counted), mean KL, top-1 agreement,
# perplexity. Everything is cached under
# $QUALITY_DIR/NAME (default ~/.cache/hearth-peers/quality/<model dir name>); nothing is written
# to the repository. Delete that folder to start over (it is wiped when the model, text, context,
# chunk count or calibration text changes).
# Knobs: CTX (512), CHUNKS (0 = all), THREADS (1), TRELLIS_BITS ("2 3 4"), LLAMA_TYPES
# ("q8_0 q4_0 q4_k_m q3_k_m q2_k"), HEARTH (build/hearth), NAME, QUALITY_DIR, BF16_GGUF.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
model=$(cd "${1:?usage: compare_quant_quality.sh MODEL_DIR TEXT [CALIB_TEXT]}" && pwd)
text=$(realpath "${2:?usage: compare_quant_quality.sh MODEL_DIR TEXT [CALIB_TEXT]}")
calib=${3:+$(realpath "$3")}
ctx=${CTX:-512}; chunks=${CHUNKS:-0}; threads=${THREADS:-1}
trellis_bits=${TRELLIS_BITS:-2 3 4}
llama_types=${LLAMA_TYPES:-q8_0 q4_0 q4_k_m q3_k_m q2_k}
hearth=${HEARTH:-$here/build/hearth}
peers=${PEERS:-$here/../shared/peers}
work=${PEERS_DIR:-$HOME/.cache/hearth-peers}
name=${NAME:-$(basename "$model")}
q=${QUALITY_DIR:-$work/quality}/$name
py=python3; python3 -c "import numpy" 2>/dev/null || py=/usr/bin/python3
[ -x "$hearth" ] || { echo "no hearth binary at $hearth (set HEARTH)" >&2; exit 1; }

# --- the cache: wiped when what the results depend on changes --------------------------------
stamp() { stat -c '%n %s %Y' "$@"; }
key=$( {
  echo "ctx $ctx chunks $chunks"
  stamp "$model"/*.safetensors "$model/config.json" "$text"
  [ -z "$calib" ] || stamp "$calib"
} | md5sum | cut -d' ' -f1)
if [ -f "$q/key" ] && [ "$(cat "$q/key")" != "$key" ]; then
  echo "inputs changed: clearing $q"
  rm -rf "$q"
fi
mkdir -p "$q/logs" "$q/hearth" "$q/gguf"
echo "$key" > "$q/key"
log=$q/logs

# --- helpers ----------------------------------------------------------------------------------
# Python helper: bits per weight of a hearth output or a GGUF against the float model, the
# types llama.cpp chose, the disjointness of two texts, the model_type.
helper=$q/quality_helper.py
cat > "$helper" <<'EOF'
import glob, json, os, re, struct, sys
from collections import Counter

def st_tensors(d):  # name -> (dtype, shape, bytes) over every safetensors file of d
    out = {}
    for fn in sorted(glob.glob(os.path.join(d, "*.safetensors"))):
        with open(fn, "rb") as f:
            n = struct.unpack("<Q", f.read(8))[0]
            hdr = json.loads(f.read(n))
        for k, v in hdr.items():
            if k != "__metadata__":
                a, b = v["data_offsets"]
                out[k] = (v["dtype"], v["shape"], b - a)
    return out

def numel(shape):
    n = 1
    for s in shape: n *= s
    return n

LAYER = re.compile(r"(^|\.)layers\.\d+\.")

def layer_linears(src):  # 2-D weights inside the layers, not norms: the quantizable linears
    return {k[: -len(".weight")]: numel(s) for k, (_, s, _) in src.items()
            if k.endswith(".weight") and len(s) == 2 and LAYER.search(k) and "norm" not in k}

def tensor_bytes(d):  # every tensor's bytes (not the headers)
    return sum(b for _, _, b in st_tensors(d).values())

cmd = sys.argv[1]
if cmd == "model_type":
    cfg = json.load(open(os.path.join(sys.argv[2], "config.json")))
    print(cfg.get("text_config", cfg).get("model_type", "?"))
elif cmd == "hearth":  # SRC OUT -> linear_bpw all_bpw packed_linears total_linears
    src, out = st_tensors(sys.argv[2]), st_tensors(sys.argv[3])
    lin = layer_linears(src)
    bits = sum(sum(out[p + s][2] for s in (".weight", ".scales", ".biases") if p + s in out) * 8 for p in lin)
    packed = sum(1 for p in lin if p + ".scales" in out)
    params = sum(numel(s) for _, s, _ in src.values())
    print(f"{bits / sum(lin.values()):.3f} {tensor_bytes(sys.argv[3]) * 8 / params:.3f} {packed} {len(lin)}")
elif cmd == "gguf":  # SRC FILE -> linear_bpw all_bpw "type:share ..." (of the layers' linear weights)
    from gguf import GGUFReader
    src = st_tensors(sys.argv[2])
    params = sum(numel(s) for _, s, _ in src.values())
    r = GGUFReader(sys.argv[3])
    lin = [t for t in r.tensors if t.name.startswith("blk.") and t.name.endswith(".weight")
           and len(t.shape) == 2 and "norm" not in t.name and "conv" not in t.name]
    n = sum(int(t.n_elements) for t in lin)
    types = Counter()
    for t in lin: types[t.tensor_type.name.lower()] += int(t.n_elements)
    emb = [t.tensor_type.name.lower() for t in r.tensors if t.name in ("token_embd.weight", "output.weight")]
    mix = " ".join(f"{k} {100 * v / n:.0f}%" for k, v in types.most_common())
    every = sum(int(t.n_bytes) for t in r.tensors)
    print(f"{sum(int(t.n_bytes) for t in lin) * 8 / n:.3f} {every * 8 / params:.3f} "
          f"layers: {mix}; token_embd/output: {'/'.join(emb)}")
elif cmd == "disjoint":  # TEXT CALIB -> fails when a paragraph of TEXT occurs in CALIB
    text, calib = (open(p, encoding="utf-8", errors="replace").read() for p in sys.argv[2:4])
    paras = [p.strip() for p in re.split(r"\n\s*\n", text) if len(p.strip()) >= 80]
    shared = sum(1 for p in paras if p in calib)
    if shared > max(1, len(paras) // 200):
        sys.exit(f"{sys.argv[3]} shares {shared} of {len(paras)} paragraphs with {sys.argv[2]}: "
                 "the calibration text must be disjoint from the evaluation text")
    print(f"calibration text shares {shared} of {len(paras)} evaluation paragraphs")
EOF
helper() { PYTHONPATH=$work/llama.cpp-src/gguf-py "$py" "$helper" "$@"; }

# "mean_kl kl_err top1 top1_err ppl ppl_err" from a perplexity log (hearth or llamacpp_kl).
scores() {
  awk '/^Final estimate: PPL/ {ppl=$5; pe=$7}
       /^Mean    KLD:/ {kl=$3; ke=$5}
       /^Same top p :/ {top=$5; te=$7}
       END {print (kl==""?"-":kl), (ke==""?"-":ke), (top==""?"-":top), (te==""?"-":te), ppl, pe}' "$1"
}
rows=()
row() { rows+=("$(printf '| %s | %s | %s | %s | %s | %s |' "$@")"); }
fmt_row() {  # LABEL LINEAR_BPW ALL_BPW LOG
  local s; read -r -a s <<< "$(scores "$4")"
  if [ "${s[0]}" = "-" ]; then row "$1" "$2" "$3" "0 (base)" "100 (base)" "${s[4]} ± ${s[5]}"
  else row "$1" "$2" "$3" "${s[0]} ± ${s[1]}" "${s[2]} ± ${s[3]}" "${s[4]} ± ${s[5]}"; fi
}
notes=()
failed() { tail -n 20 "$1" >&2; echo "failed; the whole log: $1" >&2; exit 1; }

# --- 1. the float model's distributions -------------------------------------------------------
base=$q/base.hklb
ppl_args=(-f "$text" -c "$ctx" -t "$threads")
[ "$chunks" = 0 ] || ppl_args+=(--chunks "$chunks")
if [ ! -f "$base" ] || ! grep -q '^Final estimate' "$log/bf16.log" 2>/dev/null; then
  echo "hearth: base distributions of $model"
  "$hearth" perplexity -m "$model" "${ppl_args[@]}" --kl-base "$base" --save-logits \
    > "$log/bf16.log" 2>&1 || failed "$log/bf16.log"
fi
read -r lin_bpw all_bpw _ <<< "$(helper hearth "$model" "$model")"
fmt_row "bf16 (hearth, the base)" "$lin_bpw" "$all_bpw" "$log/bf16.log"

# --- 2. hearth's quantized copies -------------------------------------------------------------
hearth_variant() {  # LABEL DIR_NAME QUANTIZE_ARGS...; returns 1 when trellis coded no layer linear
  local label=$1 tag=$2 dir=$q/hearth/$2
  shift 2
  if [ ! -f "$dir/config.json" ]; then
    echo "hearth: quantize $label"
    "$hearth" quantize -m "$model" -o "$dir" -t "$threads" "$@" \
      > "$log/$tag.quantize.log" 2>&1 || failed "$log/$tag.quantize.log"
  fi
  local lin_bpw all_bpw packed total
  read -r lin_bpw all_bpw packed total <<< "$(helper hearth "$model" "$dir")"
  if [ "$packed" = 0 ]; then return 1; fi
  [ "$packed" = "$total" ] || notes+=("$label: $packed of $total layer linears packed, the rest float")
  if ! grep -q '^Mean    KLD' "$log/$tag.log" 2>/dev/null; then
    echo "hearth: perplexity + KL of $label"
    "$hearth" perplexity -m "$dir" "${ppl_args[@]}" --kl-base "$base" > "$log/$tag.log" 2>&1 ||
      failed "$log/$tag.log"
  fi
  fmt_row "$label" "$lin_bpw" "$all_bpw" "$log/$tag.log"
}
for b in 8 4; do
  hearth_variant "hearth affine $b-bit g64" "affine$b-g64" --format affine --bits "$b" --group-size 64 ||
    notes+=("hearth affine $b-bit: no layer linear has a width that is a multiple of 64")
done
if [ -n "$calib" ]; then helper disjoint "$text" "$calib"; fi
for k in $trellis_bits; do
  if ! hearth_variant "hearth trellis $k" "trellis$k" --format trellis --bits "$k"; then
    notes+=("hearth trellis: codes none of the layers' linears, so no trellis rows; hearth quantize says: $(grep -h 'stay' "$log/trellis$k.quantize.log" | tr '\n' ' ')")
    break
  fi
  hearth_variant "hearth trellis $k --rotate" "trellis$k-rot" --format trellis --bits "$k" --rotate
  if [ -n "$calib" ]; then
    hearth_variant "hearth trellis $k --rotate --calib" "trellis$k-rot-calib" --format trellis \
      --bits "$k" --rotate --calib "$calib"
  fi
done
[ -n "$calib" ] || notes+=("no CALIB_TEXT given: the --calib rows are left out")

# --- 3. llama.cpp's copies --------------------------------------------------------------------
bash "$peers/setup.sh" > /dev/null
src=$work/llama.cpp-src
[ -d "$src" ] || git clone -q "$work/node_modules/node-llama-cpp/llama/gitRelease.bundle" "$src"
libs=$work/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64
build_driver() {  # NAME: bench/NAME.c -> $work/NAME, rebuilt when the source is newer
  if [ ! -x "$work/$1" ] || [ "$here/bench/$1.c" -nt "$work/$1" ]; then
    cc -O2 -std=c11 -I"$src/include" -I"$src/ggml/include" "$here/bench/$1.c" -o "$work/$1" \
      -L"$libs" -l:libllama.v0.5.0.so -l:libggml.v0.5.0.so -l:libggml-base.so \
      -Wl,-rpath,"$libs" -lm
  fi
}
build_driver llamacpp_quantize
build_driver llamacpp_kl
gguf_bf16=${BF16_GGUF:-$q/gguf/bf16.gguf}
model_type=$(helper model_type "$model")
if [ ! -f "$gguf_bf16" ]; then
  case $model_type in
    llama|qwen2|qwen3) "$py" "$peers/hf_to_gguf.py" "$model" "$gguf_bf16" --type bf16 > /dev/null ;;
    *) notes+=("no llama.cpp rows: ../shared/peers/hf_to_gguf.py converts llama, qwen2 and qwen3, not $model_type (BF16_GGUF=FILE supplies a GGUF)") ;;
  esac
fi
llama_variant() {  # LABEL GGUF LOG_NAME
  if ! grep -q '^Mean    KLD' "$log/$3.log" 2>/dev/null; then
    echo "llama.cpp: perplexity + KL of $1"
    "$work/llamacpp_kl" "$2" "$base" -t "$threads" > "$log/$3.log" 2> "$log/$3.err" ||
      failed "$log/$3.err"
  fi
  local lin_bpw all_bpw mix
  read -r lin_bpw all_bpw mix <<< "$(helper gguf "$model" "$2")"
  fmt_row "$1" "$lin_bpw" "$all_bpw" "$log/$3.log"
  notes+=("$1: $mix")
}
if [ -f "$gguf_bf16" ]; then
  llama_variant "llama.cpp bf16 (sanity: KL ~ 0)" "$gguf_bf16" llama-bf16
  for type in $llama_types; do
    out=$q/gguf/$type.gguf
    if [ ! -f "$out" ]; then
      echo "llama.cpp: quantize $type"
      "$work/llamacpp_quantize" "$gguf_bf16" "$out.partial" "$type" "$threads" \
        > "$log/llama-$type.quantize.log" 2>&1 || failed "$log/llama-$type.quantize.log"
      mv "$out.partial" "$out"
    fi
    llama_variant "llama.cpp ${type^^}" "$out" "llama-$type"
    fallback=$(grep -c 'falling back' "$log/llama-$type.quantize.log" || true)
    [ "$fallback" = 0 ] || notes+=("llama.cpp ${type^^}: $fallback tensors fell back from a 256-block type (width not a multiple of 256): $(grep -o 'falling back to *[a-z0-9_]*' "$log/llama-$type.quantize.log" | sed 's/falling back to *//' | sort | uniq -c | awk '{printf "%s%d to %s", (NR>1?", ":""), $1, $2}')")
  done
fi

# --- the table --------------------------------------------------------------------------------
{
  echo "$name: $(basename "$text"), context $ctx$([ "$chunks" = 0 ] || echo ", $chunks chunks"), KL over the base's top-K + rest"
  echo
  echo "| variant | bits/weight, layer linears | bits/weight, all tensors | mean KL | top-1 % | PPL |"
  echo "|---|---|---|---|---|---|"
  printf '%s\n' "${rows[@]}"
  echo
  for n in "${notes[@]}"; do echo "- $n"; done
} | tee "$q/table.md"
