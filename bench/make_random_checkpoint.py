#!/usr/bin/env python3
"""Writes a Hugging Face checkpoint directory (config.json + one model.safetensors) of random
bf16 weights in the shape of a real model, for speed benchmarks (the values do not matter, only
the bytes read). Fast: one random block is drawn once (torch on the GPU when present, else
os.urandom) and every tensor's bytes are cut from it, so writing 16 GB is disk-bound.
Adapted from ../shared/peers/make_random_model.py (same presets and tensor names).

usage: make_random_checkpoint.py PRESET OUT_DIR
presets: qwen3-0.6b qwen3-1.7b qwen3-4b qwen3-8b qwen3-8b-2l llama3-8b"""
import json, os, struct, sys

PRESETS = {
    # name: (arch, hidden, layers, heads, kv_heads, head_dim, intermediate, vocab, tied, rope_theta)
    "qwen3-tiny": ("qwen3", 64, 2, 4, 2, 16, 128, 512, True, 1e6),
    "qwen3-0.6b": ("qwen3", 1024, 28, 16, 8, 128, 3072, 151936, True, 1e6),
    "qwen3-1.7b": ("qwen3", 2048, 28, 16, 8, 128, 6144, 151936, True, 1e6),
    "qwen3-4b": ("qwen3", 2560, 36, 32, 8, 128, 9728, 151936, True, 1e6),
    "qwen3-8b": ("qwen3", 4096, 36, 32, 8, 128, 12288, 151936, False, 1e6),
    # two of Qwen3-8B's layers: the quantizer's throughput on its shapes in seconds, not minutes
    "qwen3-8b-2l": ("qwen3", 4096, 2, 32, 8, 128, 12288, 151936, False, 1e6),
    "llama3-8b": ("llama", 4096, 32, 32, 8, 128, 14336, 128256, False, 5e5),
}
BLOCK = 64 << 20  # bytes of random bf16 reused for every tensor


def random_block():
    try:
        import torch
        dev = "cuda" if torch.cuda.is_available() else "cpu"
        t = (torch.randn(BLOCK // 2, device=dev) * 0.02).to(torch.bfloat16)
        return t.view(torch.int16).cpu().numpy().tobytes()
    except ImportError:  # no torch: random mantissas, exponent of ~0.01
        b = bytearray(os.urandom(BLOCK))
        b[1::2] = bytes([0x3C]) * (BLOCK // 2)
        return bytes(b)


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in PRESETS:
        sys.exit(__doc__)
    arch, H, L, nh, nkv, hd, I, V, tied, theta = PRESETS[sys.argv[1]]
    out = sys.argv[2]
    os.makedirs(out, exist_ok=True)
    tensors = [("model.embed_tokens.weight", (V, H))]
    for i in range(L):
        p = f"model.layers.{i}."
        tensors += [(p + "input_layernorm.weight", (H,)), (p + "post_attention_layernorm.weight", (H,)),
                    (p + "self_attn.q_proj.weight", (nh * hd, H)), (p + "self_attn.k_proj.weight", (nkv * hd, H)),
                    (p + "self_attn.v_proj.weight", (nkv * hd, H)), (p + "self_attn.o_proj.weight", (H, nh * hd)),
                    (p + "mlp.gate_proj.weight", (I, H)), (p + "mlp.up_proj.weight", (I, H)),
                    (p + "mlp.down_proj.weight", (H, I))]
        if arch == "qwen3":
            tensors += [(p + "self_attn.q_norm.weight", (hd,)), (p + "self_attn.k_norm.weight", (hd,))]
    tensors.append(("model.norm.weight", (H,)))
    if not tied:
        tensors.append(("lm_head.weight", (V, H)))
    header, off = {}, 0
    for name, shape in tensors:
        n = 2
        for d in shape:
            n *= d
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [off, off + n]}
        off += n
    hb = json.dumps(header, separators=(",", ":")).encode()
    hb += b" " * ((8 - len(hb) % 8) % 8)
    block = random_block()
    ones = struct.pack("<H", 0x3F80) * (max(H, hd))  # norm gains 1.0
    with open(os.path.join(out, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(hb)))
        f.write(hb)
        pos = 0
        for name, shape in tensors:
            n = header[name]["data_offsets"][1] - header[name]["data_offsets"][0]
            if len(shape) == 1:
                f.write(ones[:n])
                continue
            while n > 0:
                k = min(n, BLOCK - pos)
                f.write(block[pos:pos + k])
                pos = (pos + k) % BLOCK
                n -= k
    cfg = {"architectures": ["Qwen3ForCausalLM" if arch == "qwen3" else "LlamaForCausalLM"],
           "model_type": arch, "hidden_size": H, "num_hidden_layers": L, "num_attention_heads": nh,
           "num_key_value_heads": nkv, "head_dim": hd, "intermediate_size": I, "vocab_size": V,
           "tie_word_embeddings": tied, "rms_norm_eps": 1e-6, "hidden_act": "silu",
           "max_position_embeddings": 40960, "rope_theta": theta, "attention_bias": False,
           "bos_token_id": 1, "eos_token_id": 2, "dtype": "bfloat16"}
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    print(f"{out}: {sys.argv[1]}, {off / 1e9:.2f} GB")


if __name__ == "__main__":
    main()
