#!/usr/bin/env python3
"""Train hearth's default model (issue 7): a byte-level BPE tokenizer and a small Qwen3.5-architecture
LM (hybrid Gated DeltaNet + gated full attention, model_type qwen3_5_text) on the Python 3.11
documentation (Debian python3.11-doc, PSF License), prepared by prepare_data.py.

Runs on the NVIDIA machine (torch 2.11, transformers 5.17, tokenizers 0.23; no network):

    python3 tools/train_default/prepare_data.py --out .device/train          # here, once
    python3 tools/train_default/train.py --data .device/train --out /tmp/default --minutes 5

Seeded. The learning-rate schedule needs a fixed step count: with --steps it is that; without,
the script times the first steps and picks the count that fits --minutes (capped at --max-epochs),
and the README it writes gives the --steps value that reproduces the schedule. Output (into --out):
config.json, generation_config.json, model.safetensors (bf16, tied head not stored),
tokenizer.json, tokenizer_config.json (ChatML template), heldout.txt, metrics.json, README.md.

Evaluation is transformers in float32 (TF32 off, eager attention) on the reloaded bf16 weights:
heldout.txt is tokenized whole, cut into non-overlapping chunks of --ctx tokens (whole chunks only;
this tokenizer adds no BOS), and every position 0..ctx-2 of a chunk is scored against the next
token -- what `hearth perplexity -f heldout.txt -c 512 --score-all` computes.

`--arch qwen3` trains a dense Qwen3 model on the same data and tokenizer instead (the quantization
comparison's model, docs/QUANTIZATION.md); it writes no model card.
"""
import argparse
import gzip
import json
import math
import os
import random
import shutil
import sys
import time
import traceback

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")

T0 = time.time()
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
                 "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
PROMPT = "The Python interpreter"
VAL_EVERY, VAL_AT = 50, 24  # validation docs (for checkpoint choice) taken from the training split


def log(*a):
    print(f"[{time.time() - T0:7.1f}s]", *a, flush=True)


def load_docs(path):
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


# ------------------------------------------------------------------------------------------------
# Tokenizer
# ------------------------------------------------------------------------------------------------

def train_tokenizer(texts, vocab_size, out):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, show_progress=False,
                                  special_tokens=SPECIAL, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer=trainer, length=len(texts))
    tok.save(os.path.join(out, "tokenizer.json"))
    ids = {t: tok.token_to_id(t) for t in SPECIAL}
    log(f"tokenizer: vocab {tok.get_vocab_size()}, special ids {ids}")
    cfg = {
        "add_bos_token": False,
        "add_eos_token": False,
        "added_tokens_decoder": {str(ids[t]): {"content": t, "lstrip": False, "normalized": False, "rstrip": False,
                                               "single_word": False, "special": True} for t in SPECIAL},
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "chat_template": CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False,
        "model_max_length": 2048,
        "tokenizer_class": "PreTrainedTokenizerFast",
    }
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump(cfg, f, indent=2, ensure_ascii=False)
        f.write("\n")
    return tok, ids


def check_tokenizer_with_transformers(out):
    try:
        from transformers import AutoTokenizer
        t = AutoTokenizer.from_pretrained(out)
        msgs = [{"role": "user", "content": "What is a list?"}]
        s = t.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
        log(f"transformers tokenizer: {type(t).__name__}, eos {t.eos_token!r}, chat template -> {s!r}")
    except Exception as e:  # only a check
        log(f"WARNING: transformers could not load/apply the tokenizer: {e!r}")


# ------------------------------------------------------------------------------------------------
# Model
# ------------------------------------------------------------------------------------------------

def model_config(args, vocab_size, ids):
    from transformers import AutoConfig

    if args.arch == "qwen3":
        # Dense Qwen3 (q/k RMSNorm, GQA, full RoPE): the shape the quantization comparison needs,
        # every width a multiple of 256.
        return AutoConfig.for_model(
            "qwen3", vocab_size=vocab_size, hidden_size=args.hidden, intermediate_size=args.intermediate,
            num_hidden_layers=args.layers, num_attention_heads=args.heads, num_key_value_heads=args.kv_heads,
            head_dim=args.head_dim, hidden_act="silu", max_position_embeddings=2048, rms_norm_eps=1e-6,
            tie_word_embeddings=True, attention_bias=False, attention_dropout=0.0, initializer_range=0.02,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
            bos_token_id=None, eos_token_id=ids["<|endoftext|>"], pad_token_id=ids["<|endoftext|>"], use_cache=True)
    n = args.layers
    layer_types = ["full_attention" if (i + 1) % args.full_every == 0 else "linear_attention" for i in range(n)]
    rot = int(args.head_dim * 0.25) // 2  # rotary frequencies; text-only M-RoPE equals plain RoPE
    kw = dict(
        vocab_size=vocab_size, hidden_size=args.hidden, intermediate_size=args.intermediate, num_hidden_layers=n,
        num_attention_heads=args.heads, num_key_value_heads=args.kv_heads, head_dim=args.head_dim,
        linear_num_key_heads=args.lin_k_heads, linear_num_value_heads=args.lin_v_heads,
        linear_key_head_dim=args.lin_head_dim, linear_value_head_dim=args.lin_head_dim, linear_conv_kernel_dim=4,
        layer_types=layer_types, hidden_act="silu", max_position_embeddings=2048, rms_norm_eps=1e-6,
        tie_word_embeddings=True, attention_bias=False, attention_dropout=0.0, initializer_range=0.02,
        partial_rotary_factor=0.25,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25,
                         "mrope_section": [-(-rot // 3), -(-rot // 3), rot - 2 * -(-rot // 3)], "mrope_interleaved": True},
        bos_token_id=None, eos_token_id=ids["<|endoftext|>"], pad_token_id=ids["<|endoftext|>"], use_cache=True,
    )
    return AutoConfig.for_model("qwen3_5_text", **kw)


def model_class(cfg):
    import transformers
    if cfg.model_type == "qwen3":
        return transformers.Qwen3ForCausalLM
    try:
        import transformers.models.qwen3_5 as q
        log(f"transformers.models.qwen3_5: {[n for n in dir(q) if n.startswith('Qwen3_5')]}")
    except Exception as e:
        log(f"WARNING: transformers.models.qwen3_5 not importable: {e!r}")
    cls = getattr(transformers, "Qwen3_5ForCausalLM", None)
    if cls is None:
        from transformers import AutoModelForCausalLM
        cls = type(AutoModelForCausalLM.from_config(cfg))
        log(f"!!!!! FALLBACK: transformers has no Qwen3_5ForCausalLM; AutoModelForCausalLM gave {cls.__name__} !!!!!")
    log(f"model class: {cls.__module__}.{cls.__name__}")
    return cls


# ------------------------------------------------------------------------------------------------
# Training
# ------------------------------------------------------------------------------------------------

def token_stream(tok, docs, eot):
    import numpy as np
    encs = tok.encode_batch([d["text"] for d in docs])
    parts = []
    for e in encs:
        parts.append(np.asarray(e.ids, dtype=np.int64))
        parts.append(np.asarray([eot], dtype=np.int64))
    return np.concatenate(parts)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--arch", choices=["qwen3_5", "qwen3"], default="qwen3_5",
                    help="qwen3_5: the default model's hybrid; qwen3: a dense model (no DeltaNet flags apply)")
    ap.add_argument("--data", default=".device/train")
    ap.add_argument("--out", default="/tmp/default")
    ap.add_argument("--minutes", type=float, default=5.0, help="wall-clock budget of the training loop")
    ap.add_argument("--steps", type=int, default=0, help="fixed optimizer steps (overrides --minutes)")
    ap.add_argument("--max-epochs", type=float, default=12.0)
    ap.add_argument("--patience", type=int, default=2,
                    help="stop after this many validation passes in a row worse than the best")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=1.5e-3)
    ap.add_argument("--min-lr-frac", type=float, default=0.1)
    ap.add_argument("--wd", type=float, default=0.1)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--hidden", type=int, default=384)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--full-every", type=int, default=4)
    ap.add_argument("--heads", type=int, default=6)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--lin-k-heads", type=int, default=4)
    ap.add_argument("--lin-v-heads", type=int, default=8)
    ap.add_argument("--lin-head-dim", type=int, default=48)
    ap.add_argument("--intermediate", type=int, default=576)
    ap.add_argument("--ctx", type=int, default=512, help="evaluation context")
    ap.add_argument("--max-bytes", type=int, default=30_000_000)
    ap.add_argument("--shard-size", default="", help="save_pretrained's max_shard_size, e.g. 15MB (default: one file)")
    args = ap.parse_args()
    command = "python3 tools/train_default/train.py " + " ".join(sys.argv[1:])

    import numpy as np
    import torch
    import torch.nn.functional as F
    import transformers
    import tokenizers

    log(f"python {sys.version.split()[0]}, torch {torch.__version__}, transformers {transformers.__version__}, "
        f"tokenizers {tokenizers.__version__}, cuda {torch.cuda.is_available()}")
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    if dev == "cuda":
        log(f"device: {torch.cuda.get_device_name(0)}")
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    torch.cuda.manual_seed_all(args.seed)
    out = args.out
    os.makedirs(out, exist_ok=True)
    metrics = {"command": command, "seed": args.seed, "args": vars(args),
               "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                            "tokenizers": tokenizers.__version__}}

    # ---- data
    train_all = load_docs(os.path.join(args.data, "train.jsonl.gz"))
    heldout_docs = load_docs(os.path.join(args.data, "heldout.jsonl.gz"))
    with open(os.path.join(args.data, "manifest.json")) as f:
        manifest = json.load(f)
    val_docs = [d for i, d in enumerate(train_all) if i % VAL_EVERY == VAL_AT]
    train_docs = [d for i, d in enumerate(train_all) if i % VAL_EVERY != VAL_AT]
    log(f"docs: train {len(train_docs)}, validation {len(val_docs)} (from the training split), "
        f"held-out {len(heldout_docs)}")
    shutil.copy(os.path.join(args.data, "heldout.txt"), os.path.join(out, "heldout.txt"))

    # ---- tokenizer (trained on the training docs only)
    tok, ids = train_tokenizer([d["text"] for d in train_docs], args.vocab, out)
    check_tokenizer_with_transformers(out)
    eot = ids["<|endoftext|>"]
    train_ids = token_stream(tok, train_docs, eot)
    val_ids = token_stream(tok, val_docs, eot)
    n_chars = sum(len(d["text"]) for d in train_docs)
    log(f"tokens: train {len(train_ids):,} ({n_chars / len(train_ids):.2f} chars/token), val {len(val_ids):,}")
    metrics.update(train_tokens=int(len(train_ids)), val_tokens=int(len(val_ids)), train_docs=len(train_docs),
                   val_docs=len(val_docs), heldout_docs=len(heldout_docs), vocab_size=tok.get_vocab_size())

    # ---- model
    cfg = model_config(args, tok.get_vocab_size(), ids)
    cls = model_class(cfg)
    model = cls(cfg).to(dev)
    n_params = sum(p.numel() for p in model.parameters())
    log(f"config: {type(cfg).__name__} model_type={cfg.model_type} layer_types={getattr(cfg, 'layer_types', None)}")
    log(f"parameters: {n_params:,} (embeddings {model.get_input_embeddings().weight.numel():,}, tied head)")
    metrics.update(model_class=f"{cls.__module__}.{cls.__name__}", parameters=int(n_params))

    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (decay if p.ndim >= 2 else no_decay).append(p)
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.wd}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8, fused=(dev == "cuda"))
    set_tf32(torch, True)

    train_t = torch.from_numpy(train_ids).to(dev)
    val_t = torch.from_numpy(val_ids).to(dev)
    S, B = args.seq, args.batch
    gen = torch.Generator(device="cpu").manual_seed(args.seed)
    ar = torch.arange(S + 1, device=dev)

    def epoch_windows():
        off = int(torch.randint(0, S, (1,), generator=gen))
        starts = torch.arange(off, len(train_t) - S - 1, S)
        return starts[torch.randperm(len(starts), generator=gen)].to(dev)

    windows_per_epoch = (len(train_t) - 1) // S
    steps_per_epoch = windows_per_epoch / B
    max_steps_epochs = int(args.max_epochs * steps_per_epoch)

    @torch.no_grad()
    def val_loss():
        model.eval()
        n = (len(val_t) - 1) // S
        tot, cnt = 0.0, 0
        for i in range(0, n, 64):
            k = min(64, n - i)
            idx = (torch.arange(i, i + k, device=dev) * S)[:, None] + ar[None, :]
            x = val_t[idx]
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=(dev == "cuda")):
                logits = model(input_ids=x[:, :-1], use_cache=False).logits
            l = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1), reduction="sum")
            tot += float(l)
            cnt += x[:, 1:].numel()
        model.train()
        return tot / max(cnt, 1)

    total_steps = args.steps if args.steps > 0 else max_steps_epochs
    fixed = args.steps > 0
    log(f"training: {B}x{S} tokens/step, {steps_per_epoch:.1f} steps/epoch, "
        f"{'fixed ' + str(total_steps) + ' steps' if fixed else f'budget {args.minutes} min, cap {max_steps_epochs} steps ({args.max_epochs} epochs)'}")

    def lr_at(step):
        if step < args.warmup:
            return args.lr * (step + 1) / args.warmup
        p = min(1.0, (step - args.warmup) / max(1, total_steps - args.warmup))
        return args.lr * (args.min_lr_frac + (1 - args.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * p)))

    model.train()
    queue = epoch_windows()
    qpos = 0
    step = 0
    t_train = time.time()
    t_calib = None
    calib_from = 5
    best = (float("inf"), -1, None)
    history = []
    eval_every = max(50, total_steps // 10)
    tokens_seen = 0
    worse = 0
    try:
        while step < total_steps:
            if qpos + B > len(queue):
                queue = epoch_windows()
                qpos = 0
            idx = queue[qpos:qpos + B, None] + ar[None, :]
            qpos += B
            x = train_t[idx]
            for g in opt.param_groups:
                g["lr"] = lr_at(step)
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=(dev == "cuda")):
                logits = model(input_ids=x[:, :-1], use_cache=False).logits
            loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            step += 1
            tokens_seen += B * S
            if step == calib_from:
                if dev == "cuda":
                    torch.cuda.synchronize()
                t_calib = time.time()
            if not fixed and step == calib_from + 30:
                if dev == "cuda":
                    torch.cuda.synchronize()
                per_step = (time.time() - t_calib) / 30
                budget = args.minutes * 60 - (time.time() - t_train)
                # leave ~12% of the budget for the validation passes
                fit = step + int(0.88 * budget / per_step)
                total_steps = max(step + 1, min(max_steps_epochs, fit))
                eval_every = max(50, total_steps // 10)
                log(f"timing: {per_step * 1000:.1f} ms/step ({B * S / per_step:,.0f} tokens/s) -> {total_steps} steps "
                    f"({total_steps / steps_per_epoch:.1f} epochs)")
            if step % 25 == 0 or step == 1:
                log(f"step {step}/{total_steps} loss {loss.item():.4f} lr {lr_at(step - 1):.2e} gnorm {gnorm.item():.2f} "
                    f"epoch {tokens_seen / (windows_per_epoch * S):.2f}")
                if not math.isfinite(loss.item()):
                    raise RuntimeError(f"loss is {loss.item()} at step {step}")
            if step % eval_every == 0 or step == total_steps:
                vl = val_loss()
                history.append({"step": step, "val_loss": vl, "train_loss": loss.item(),
                                "seconds": round(time.time() - t_train, 1)})
                log(f"  validation loss {vl:.4f} (ppl {math.exp(vl):.2f}) at step {step}")
                if vl < best[0]:
                    best = (vl, step, {k: v.detach().clone() for k, v in model.state_dict().items()})
                    worse = 0
                else:
                    worse += 1
                    if worse >= args.patience:
                        log(f"validation loss rose {worse} times in a row: stopping early at step {step}")
                        break
            if not fixed and time.time() - t_train > args.minutes * 60 * 1.05:
                log(f"WARNING: wall-clock budget exceeded at step {step}; stopping")
                break
    except Exception:
        log("ERROR during training (the best/last weights are still saved):")
        traceback.print_exc()
        sys.stdout.flush()
    train_seconds = time.time() - t_train
    if step > 0 and (not history or history[-1]["step"] != step):
        try:
            vl = val_loss()
            history.append({"step": step, "val_loss": vl, "seconds": round(time.time() - t_train, 1)})
            log(f"  validation loss {vl:.4f} (ppl {math.exp(vl):.2f}) at the last step {step}")
            if vl < best[0]:
                best = (vl, step, None)
        except Exception:
            traceback.print_exc()
    log(f"trained {step} steps, {tokens_seen:,} tokens ({tokens_seen / len(train_t):.1f} epochs) in {train_seconds:.0f} s")
    if best[2] is not None and best[1] != step:  # best[2] is None when the last step is the best
        log(f"using the best validation checkpoint: step {best[1]} (val {best[0]:.4f})")
        model.load_state_dict(best[2])
    metrics.update(steps=step, schedule_steps=total_steps, tokens_seen=int(tokens_seen), epochs=tokens_seen / len(train_t),
                   train_seconds=round(train_seconds, 1), chosen_step=best[1] if best[1] >= 0 else step,
                   best_val_loss=best[0], val_history=history)

    # ---- save (before any evaluation can fail)
    try:
        from transformers import GenerationConfig
        model = model.to(torch.bfloat16)
        try:
            model.config.dtype = torch.bfloat16
        except Exception as e:
            log(f"note: could not set config.dtype: {e!r}")
        model.save_pretrained(out, **({"max_shard_size": args.shard_size} if args.shard_size else {}))
        gc = GenerationConfig(bos_token_id=None, eos_token_id=[ids["<|endoftext|>"], ids["<|im_end|>"]],
                              pad_token_id=ids["<|endoftext|>"], do_sample=True, temperature=0.7, top_k=40,
                              top_p=0.9, repetition_penalty=1.1)
        gc.save_pretrained(out)
        sizes = {f: os.path.getsize(os.path.join(out, f)) for f in sorted(os.listdir(out))}
        total = sum(v for k, v in sizes.items() if k not in ("heldout.txt",))
        log(f"saved: {sizes}; checkpoint total {total:,} bytes ({total / 1e6:.2f} MB)")
        if total > args.max_bytes:
            log(f"!!!!! WARNING: checkpoint is {total:,} bytes, over the {args.max_bytes:,} limit !!!!!")
        metrics.update(files=sizes, checkpoint_bytes=total)
    except Exception:
        log("ERROR while saving:")
        traceback.print_exc()
    write_metrics(out, metrics)

    # ---- evaluation in float32 on the saved bf16 weights
    try:
        evaluate(args, out, cls, metrics, heldout_docs, dev)
    except Exception:
        log("ERROR during evaluation:")
        traceback.print_exc()
    write_metrics(out, metrics)
    try:
        if args.arch == "qwen3_5":  # the model card describes the default model; metrics.json has the rest
            write_readme(out, metrics, manifest, args)
    except Exception:
        log("ERROR writing README:")
        traceback.print_exc()
    log("done")
    return 0


def set_tf32(torch, on):
    """TF32 for training speed; off for the float32 reference evaluation."""
    try:
        torch.set_float32_matmul_precision("high" if on else "highest")
    except Exception as e:
        log(f"note: set_float32_matmul_precision: {e!r}")
    try:
        torch.backends.cudnn.allow_tf32 = on
    except Exception as e:
        log(f"note: cudnn.allow_tf32: {e!r}")


def write_metrics(out, metrics):
    with open(os.path.join(out, "metrics.json"), "w") as f:
        json.dump(metrics, f, indent=1, default=str)
        f.write("\n")


def evaluate(args, out, cls, metrics, heldout_docs, dev):
    import torch
    from tokenizers import Tokenizer

    set_tf32(torch, False)
    model, info = cls.from_pretrained(out, dtype=torch.float32, attn_implementation="eager",
                                      output_loading_info=True)
    bad = {k: v for k, v in info.items() if v}
    log(f"reloaded {type(model).__name__} in float32; loading info problems: {bad or 'none'}")
    model = model.to(dev).eval()
    tok = Tokenizer.from_file(os.path.join(out, "tokenizer.json"))

    @torch.no_grad()
    def ppl(text, ctx):
        ids = tok.encode(text).ids
        n = len(ids) // ctx
        if n == 0:
            return None
        t = torch.tensor(ids[: n * ctx], device=dev).view(n, ctx)
        res = {}
        sums = {"all": 0.0, "half": 0.0}
        cnts = {"all": 0, "half": 0}
        for i in range(0, n, 16):
            x = t[i:i + 16]
            logits = model(input_ids=x, use_cache=False).logits.float()
            lp = torch.log_softmax(logits[:, :-1], dim=-1)
            nll = -lp.gather(-1, x[:, 1:, None])[..., 0].double()  # [b, ctx-1]: position p predicts p+1
            sums["all"] += float(nll.sum())
            cnts["all"] += nll.numel()
            sums["half"] += float(nll[:, ctx // 2:].sum())
            cnts["half"] += nll[:, ctx // 2:].numel()
        res["tokens"] = len(ids)
        res["chunks"] = n
        res["ppl_score_all"] = math.exp(sums["all"] / cnts["all"])
        res["scored_all"] = cnts["all"]
        res["ppl_second_half"] = math.exp(sums["half"] / cnts["half"])
        return res

    with open(os.path.join(out, "heldout.txt"), encoding="utf-8", newline="") as f:
        held_txt = f.read()
    r = ppl(held_txt, args.ctx)
    log(f"held-out heldout.txt ({len(held_txt.encode('utf-8')):,} bytes): {r}")
    metrics["heldout_txt"] = r
    full = "\n\n".join(d["text"] for d in heldout_docs)
    r2 = ppl(full, args.ctx)
    log(f"held-out, all {len(heldout_docs)} documents: {r2}")
    metrics["heldout_all_docs"] = r2

    prompt_ids = torch.tensor([tok.encode(PROMPT).ids], device=dev)
    from transformers import GenerationConfig
    eos = [tok.token_to_id("<|endoftext|>"), tok.token_to_id("<|im_end|>")]
    greedy = GenerationConfig(do_sample=False, max_new_tokens=64, eos_token_id=eos, pad_token_id=eos[0])
    g = model.generate(input_ids=prompt_ids, attention_mask=torch.ones_like(prompt_ids), generation_config=greedy)
    new = g[0, prompt_ids.shape[1]:].tolist()
    text = tok.decode(g[0].tolist(), skip_special_tokens=False)
    log(f"greedy sample ({len(new)} new tokens): {text!r}")
    metrics["greedy_prompt"] = PROMPT
    metrics["greedy_prompt_ids"] = prompt_ids[0].tolist()
    metrics["greedy_ids"] = new
    metrics["greedy_text"] = text


def write_readme(out, m, manifest, args):
    h = m.get("heldout_txt") or {}
    ha = m.get("heldout_all_docs") or {}
    fmt = lambda v: f"{v:.3f}" if isinstance(v, float) else "n/a"
    lines = f"""# hearth default model

A small Qwen3.5-architecture language model (`model_type` `qwen3_5_text`, `Qwen3_5ForCausalLM`:
hybrid Gated DeltaNet + gated full attention) trained by hearth's own tooling,
`tools/train_default/`. hearth loads it when no `-m` is given. It writes English about Python;
it knows nothing else and is not an assistant (the chat template is there for plumbing, the
model never saw a chat).

## Model

| | |
|---|---|
| parameters | {m.get('parameters', 0):,} (tied input/output embeddings) |
| layers | {args.layers}: {', '.join('full' if (i + 1) % args.full_every == 0 else 'linear' for i in range(args.layers))} |
| hidden / MLP | {args.hidden} / {args.intermediate} (SiLU-gated) |
| full attention | {args.heads} query heads, {args.kv_heads} KV heads, head_dim {args.head_dim}, output gate, q/k RMSNorm, RoPE θ 1e4 on 25% of dims |
| Gated DeltaNet | {args.lin_k_heads} key heads / {args.lin_v_heads} value heads of {args.lin_head_dim}, conv kernel 4 |
| vocabulary | {m.get('vocab_size')} byte-level BPE; `<|endoftext|>` separates documents; `<|im_start|>`, `<|im_end|>` for ChatML |
| weights | bf16 `model.safetensors`, {m.get('checkpoint_bytes', 0) / 1e6:.1f} MB with config and tokenizer |
| trained context | {args.seq} tokens |

## Data and license

Text of the Python 3.11 documentation from the Debian package `python3.11-doc`
(`{manifest.get('source', '').split('(')[-1].rstrip(')')}`, sha256 `{manifest.get('deb_sha256', '')[:16]}…`), licensed under the
**PSF License Version 2** (Copyright © 2001-2023 Python Software Foundation; see the package's
`/usr/share/doc/python3.11-doc/copyright` and the documentation's `license.html`). The weights are
derived from that text. `tools/train_default/prepare_data.py` converts the HTML to plain text
(main body only, code blocks kept). {manifest.get('train_docs')} pages for training (of which every
{VAL_EVERY}th, {m.get('val_docs')} pages, is kept apart for choosing the checkpoint), {manifest.get('heldout_docs')}
pages held out ({manifest.get('heldout_rule')}). Training tokens: {m.get('train_tokens', 0):,}.
`heldout.txt` is the first {manifest.get('heldout_txt_bytes', 0):,} bytes of the held-out pages.

## Training

```
python3 tools/train_default/prepare_data.py --out .device/train
{m.get('command')}
```

Seed {m.get('seed')}; AdamW (β 0.9/0.95, weight decay {args.wd}), peak LR {args.lr}, {args.warmup} warm-up steps,
cosine to {args.min_lr_frac}×, batch {args.batch}×{args.seq} tokens, bf16 autocast, one NVIDIA H200.
{m.get('steps')} steps ({m.get('epochs', 0):.1f} epochs, {m.get('train_seconds')} s); checkpoint from step
{m.get('chosen_step')} (lowest validation loss {fmt(m.get('best_val_loss'))}). To repeat the same schedule
add `--steps {m.get('schedule_steps')}`, the schedule length the timing chose (GPU kernels are not bit-deterministic, so expect close, not identical, weights).
Software: torch {m['versions']['torch']}, transformers {m['versions']['transformers']}, tokenizers {m['versions']['tokenizers']}.

## Held-out perplexity

transformers, float32 on these bf16 weights, context {args.ctx}, non-overlapping chunks, every token
after the first of each chunk scored (= `hearth perplexity -f heldout.txt -c {args.ctx} --score-all`):

| text | tokens | chunks | PPL (score all) | PPL (second half of each chunk) |
|---|---|---|---|---|
| `heldout.txt` | {h.get('tokens')} | {h.get('chunks')} | **{fmt(h.get('ppl_score_all'))}** | {fmt(h.get('ppl_second_half'))} |
| all held-out pages | {ha.get('tokens')} | {ha.get('chunks')} | {fmt(ha.get('ppl_score_all'))} | {fmt(ha.get('ppl_second_half'))} |

## Sample

Greedy, 64 new tokens, prompt `{m.get('greedy_prompt')}` (transformers):

```
{m.get('greedy_text', 'n/a')}
```
"""
    with open(os.path.join(out, "README.md"), "w") as f:
        f.write(lines)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception:
        traceback.print_exc()
        sys.stdout.flush()
        sys.exit(1)
