#!/usr/bin/env python3
"""Writes a tokenizer for a random checkpoint whose every id has text of its own, so that a
served benchmark (bench/bench_serving.py) sees each generated token arrive as it is made.

A random checkpoint picks ids across its whole vocabulary (151,936 for the Qwen3 shapes, 248,320
for Qwen3.5). The bundled model's tokenizer has 8,192 tokens: ids past those have no text, the
server streams nothing for them, and the client's time to first token and inter-token gaps then
run over several steps. This copies the bundled tokenizer (its merges, special tokens and byte
level pre-tokenizer) and gives every further id up to the checkpoint's vocab_size a word of its
own, " w<id>" (byte-level "Ġw<id>"), reached by id only: prompts are sent as ids.

Usage: bench/tokenizer_for_random.py CHECKPOINT_DIR [SOURCE_DIR]
  SOURCE_DIR defaults to the bundled model (models/default)."""
import json, os, sys


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__.split("\n\n")[-1])
    dst = sys.argv[1]
    src = sys.argv[2] if len(sys.argv) == 3 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "models", "default")
    with open(os.path.join(dst, "config.json")) as f:
        config = json.load(f)
    # Qwen3.5 checkpoints keep the language model's fields under text_config.
    n_vocab = config.get("vocab_size") or config.get("text_config", {}).get("vocab_size")
    if not isinstance(n_vocab, int) or n_vocab < 1:
        sys.exit(f"{dst}/config.json: no vocab_size")
    with open(os.path.join(src, "tokenizer.json")) as f:
        tok = json.load(f)
    vocab = tok["model"]["vocab"]
    taken = set(vocab.values()) | {t["id"] for t in tok.get("added_tokens", [])}
    if max(taken) >= n_vocab:
        sys.exit(f"{src}: its ids reach {max(taken)}, past the checkpoint's {n_vocab}")
    for i in range(n_vocab):
        if i not in taken:
            vocab[f"\u0120w{i}"] = i
    with open(os.path.join(dst, "tokenizer.json"), "w") as f:
        json.dump(tok, f, ensure_ascii=False)
    with open(os.path.join(src, "tokenizer_config.json")) as f:
        cfg = f.read()
    with open(os.path.join(dst, "tokenizer_config.json"), "w") as f:
        f.write(cfg)
    print(f"{dst}: tokenizer of {n_vocab} ids ({n_vocab - len(taken)} added words)")


if __name__ == "__main__":
    main()
