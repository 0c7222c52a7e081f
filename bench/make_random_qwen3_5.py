#!/usr/bin/python3
"""Random bf16 checkpoints with real Qwen3.5-family shapes, for `hearth bench` (docs/PERFORMANCE.md).

  dense: Qwen3.5-0.8B shape (qwen3_5_text): hidden 1024, 24 layers (full attention every 4th via
         full_attention_interval), 8/2 heads of 256, Gated DeltaNet 16 key / 16 value heads of 128,
         intermediate 3584, vocab 248320, tied embeddings.
  9b:    Qwen3.5-9B shape: hidden 4096, 32 layers (full attention every 4th), 16/4 heads of 256,
         Gated DeltaNet 16 key / 32 value heads of 128, intermediate 12288, vocab 248320, untied.
  moe:   Qwen3-30B-A3B's layer shape (qwen3_moe) cut to 8 layers: hidden 2048, 32/4 heads of 128,
         128 experts of 768, top-8, vocab 151936, untied.

Weights are slices of one random pool (scaled ~1/sqrt(fan_in)): the numbers are meaningless, only
the shapes and byte counts matter. Tensors are streamed to disk one at a time, so memory stays small.
  9b-4l: the 9b shape with 4 layers (3 linear, 1 full attention), for kernel profiles.
Usage: /usr/bin/python3 bench/make_random_qwen3_5.py dense|9b|9b-4l|moe OUT_DIR
"""
import json
import os
import struct
import sys

import numpy as np

rng = np.random.default_rng(0)
POOL = rng.standard_normal(1 << 24, dtype=np.float32)


def bf16(a):
    """float32 -> bf16 bits (round to nearest even)."""
    u = a.view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


POOL_BF16 = {}


def random_bf16(n, scale):
    key = scale
    if key not in POOL_BF16:
        POOL_BF16[key] = bf16(POOL * np.float32(scale))
    pool = POOL_BF16[key]
    out = np.empty(n, dtype=np.uint16)
    done = 0
    while done < n:
        start = int(rng.integers(0, pool.size // 2))
        take = min(n - done, pool.size - start)
        out[done:done + take] = pool[start:start + take]
        done += take
    return out


def write(out_dir, config, tensors):
    """tensors: list of (name, shape, generator() -> uint16 array)."""
    os.makedirs(out_dir, exist_ok=True)
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, shape, _ in tensors:
        n = int(np.prod(shape)) * 2
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, offset + n]}
        offset += n
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(os.path.join(out_dir, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for name, shape, gen in tensors:
            data = gen()
            assert data.size == int(np.prod(shape)), name
            f.write(data.tobytes())
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(config, f, indent=1)
    print(f"{out_dir}: {len(tensors)} tensors, {offset / 2**30:.2f} GiB")


def dense_tensor(shape, fan_in=None):
    n = int(np.prod(shape))
    fan_in = fan_in or shape[-1]
    return (tuple(shape), lambda: random_bf16(n, 1.0 / np.sqrt(fan_in)))


def small(values):
    return lambda: bf16(np.asarray(values, dtype=np.float32))


DENSE_SHAPES = {
    # hidden, layers, vocab, intermediate, q heads, kv heads, head dim, linear key / value heads, tied
    "dense": (1024, 24, 248320, 3584, 8, 2, 256, 16, 16, True),
    "9b": (4096, 32, 248320, 12288, 16, 4, 256, 16, 32, False),
    # the 9B's layers, four of them (three linear, one full): profiling one step's kernels
    "9b-4l": (4096, 4, 248320, 12288, 16, 4, 256, 16, 32, False),
}


def dense_model(out_dir, shape="dense"):
    H, L, V, I, nq, nkv, D, hk, hv, tied = DENSE_SHAPES[shape]
    dk, dv, K = 128, 128, 4
    conv_dim = 2 * hk * dk + hv * dv
    config = {
        "architectures": ["Qwen3_5ForCausalLM"], "model_type": "qwen3_5_text",
        "hidden_size": H, "num_hidden_layers": L, "vocab_size": V, "intermediate_size": I,
        "num_attention_heads": nq, "num_key_value_heads": nkv, "head_dim": D,
        "linear_num_key_heads": hk, "linear_num_value_heads": hv, "linear_key_head_dim": dk,
        "linear_value_head_dim": dv, "linear_conv_kernel_dim": K, "full_attention_interval": 4,
        "hidden_act": "silu", "rms_norm_eps": 1e-6, "max_position_embeddings": 262144,
        "tie_word_embeddings": tied, "bos_token_id": 248044, "eos_token_id": 248044,
        "rope_parameters": {"rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.25},
    }
    t = [("model.embed_tokens.weight",) + dense_tensor((V, H), fan_in=1)]
    if not tied:
        t.append(("lm_head.weight",) + dense_tensor((V, H)))
    t.append(("model.norm.weight", (H,), small(np.zeros(H))))
    for i in range(L):
        p = f"model.layers.{i}."
        t.append((p + "input_layernorm.weight", (H,), small(np.zeros(H))))
        t.append((p + "post_attention_layernorm.weight", (H,), small(np.zeros(H))))
        if (i + 1) % 4 == 0:
            a = p + "self_attn."
            t.append((a + "q_proj.weight",) + dense_tensor((2 * nq * D, H)))
            t.append((a + "k_proj.weight",) + dense_tensor((nkv * D, H)))
            t.append((a + "v_proj.weight",) + dense_tensor((nkv * D, H)))
            t.append((a + "o_proj.weight",) + dense_tensor((H, nq * D)))
            t.append((a + "q_norm.weight", (D,), small(np.zeros(D))))
            t.append((a + "k_norm.weight", (D,), small(np.zeros(D))))
        else:
            a = p + "linear_attn."
            t.append((a + "in_proj_qkv.weight",) + dense_tensor((conv_dim, H)))
            t.append((a + "in_proj_z.weight",) + dense_tensor((hv * dv, H)))
            t.append((a + "in_proj_b.weight",) + dense_tensor((hv, H)))
            t.append((a + "in_proj_a.weight",) + dense_tensor((hv, H)))
            t.append((a + "conv1d.weight", (conv_dim, 1, K), lambda: random_bf16(conv_dim * K, 0.5)))
            t.append((a + "A_log", (hv,), small(np.log(np.linspace(1, 16, hv)))))
            t.append((a + "dt_bias", (hv,), small(np.zeros(hv))))
            t.append((a + "norm.weight", (dv,), small(np.ones(dv))))
            t.append((a + "out_proj.weight",) + dense_tensor((H, hv * dv)))
        t.append((p + "mlp.gate_proj.weight",) + dense_tensor((I, H)))
        t.append((p + "mlp.up_proj.weight",) + dense_tensor((I, H)))
        t.append((p + "mlp.down_proj.weight",) + dense_tensor((H, I)))
    write(out_dir, config, t)


def moe_model(out_dir):
    H, L, V = 2048, 8, 151936
    nq, nkv, D = 32, 4, 128
    E, k, I = 128, 8, 768
    config = {
        "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe",
        "hidden_size": H, "num_hidden_layers": L, "vocab_size": V, "intermediate_size": 6144,
        "num_attention_heads": nq, "num_key_value_heads": nkv, "head_dim": D,
        "num_experts": E, "num_experts_per_tok": k, "moe_intermediate_size": I,
        "norm_topk_prob": True, "decoder_sparse_step": 1, "mlp_only_layers": [],
        "hidden_act": "silu", "rms_norm_eps": 1e-6, "max_position_embeddings": 40960,
        "tie_word_embeddings": False, "bos_token_id": 151643, "eos_token_id": 151645,
        "rope_parameters": {"rope_type": "default", "rope_theta": 1e6},
    }
    t = [("model.embed_tokens.weight",) + dense_tensor((V, H), fan_in=1),
         ("lm_head.weight",) + dense_tensor((V, H)),
         ("model.norm.weight", (H,), small(np.ones(H)))]
    for i in range(L):
        p = f"model.layers.{i}."
        t.append((p + "input_layernorm.weight", (H,), small(np.ones(H))))
        t.append((p + "post_attention_layernorm.weight", (H,), small(np.ones(H))))
        a = p + "self_attn."
        t.append((a + "q_proj.weight",) + dense_tensor((nq * D, H)))
        t.append((a + "k_proj.weight",) + dense_tensor((nkv * D, H)))
        t.append((a + "v_proj.weight",) + dense_tensor((nkv * D, H)))
        t.append((a + "o_proj.weight",) + dense_tensor((H, nq * D)))
        t.append((a + "q_norm.weight", (D,), small(np.ones(D))))
        t.append((a + "k_norm.weight", (D,), small(np.ones(D))))
        t.append((p + "mlp.gate.weight",) + dense_tensor((E, H)))
        # Fused layout (as transformers holds it in memory): one view per expert at load.
        t.append((p + "mlp.experts.gate_up_proj", (E, 2 * I, H), lambda: random_bf16(E * 2 * I * H, 1 / np.sqrt(H))))
        t.append((p + "mlp.experts.down_proj", (E, H, I), lambda: random_bf16(E * H * I, 1 / np.sqrt(I))))
    write(out_dir, config, t)


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("dense", "9b", "9b-4l", "moe"):
        sys.exit(__doc__)
    if sys.argv[1] == "moe":
        moe_model(sys.argv[2])
    else:
        dense_model(sys.argv[2], sys.argv[1])
