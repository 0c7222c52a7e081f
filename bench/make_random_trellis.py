#!/usr/bin/env python3
"""Writes a trellis-coded copy of a random bf16 checkpoint (bench/make_random_checkpoint.py) for
decode and prefill speed benchmarks: every 2-D linear weight of the decoder layers, and the
output head, becomes k-bit trellis codes (random: the kernels' speed does not depend on the
values) with fp16 row scales, laid out as hearth's trellis format stores them (axis 0, stored
transposed, for MLP down projections; axis 1 for the others). Norms and the embedding are copied.
Random codes decode to unit-variance values, so a scale of 0.02 gives weights of the source's
magnitude.

usage: make_random_trellis.py SRC_DIR OUT_DIR BITS"""
import json, os, struct, sys

BLOCK = 64 << 20  # random code bytes reused for every tensor
SCALE_F16 = struct.pack("<e", 0.02)


def read_header(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return json.loads(f.read(n)), 8 + n


def is_coded(name, shape):
    return len(shape) == 2 and name.endswith(".weight") and ("layers." in name or name == "lm_head.weight")


def main():
    if len(sys.argv) != 4 or sys.argv[3] not in ("2", "3", "4"):
        sys.exit(__doc__)
    src, out, k = sys.argv[1], sys.argv[2], int(sys.argv[3])
    header, data_start = read_header(os.path.join(src, "model.safetensors"))
    header.pop("__metadata__", None)
    entries, quant = [], {"group_size": 256, "bits": k, "mode": "trellis",
                          "trellis": {"L": 12, "code": "1mad", "axis": 1}}
    for name, info in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        shape = info["shape"]
        if not is_coded(name, shape):
            entries.append((name, info["dtype"], shape, ("copy", info["data_offsets"])))
            continue
        module = name[: -len(".weight")]
        rows_out, cols_in = shape
        axis = 0 if module.endswith("mlp.down_proj") else 1
        rows, cols = (rows_out, cols_in) if axis == 1 else (cols_in, rows_out)
        if cols % 256:
            sys.exit(f"{name}: coded dimension {cols} is not a multiple of 256")
        entries.append((name, "U32", [rows, cols * k // 32], ("random", rows * cols * k // 8)))
        entries.append((module + ".scales", "F16", [rows], ("scales", rows * 2)))
        if axis == 0:
            quant[module] = {"group_size": 256, "bits": k, "mode": "trellis",
                             "trellis": {"L": 12, "code": "1mad", "axis": 0}}
    hdr, off = {}, 0
    for name, dtype, shape, (kind, arg) in entries:
        n = arg[1] - arg[0] if kind == "copy" else arg
        hdr[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + n]}
        off += n
    hb = json.dumps(hdr, separators=(",", ":")).encode()
    hb += b" " * ((8 - len(hb) % 8) % 8)
    os.makedirs(out, exist_ok=True)
    block, pos = os.urandom(BLOCK), 0
    with open(os.path.join(src, "model.safetensors"), "rb") as fin, \
            open(os.path.join(out, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(hb)))
        f.write(hb)
        for name, dtype, shape, (kind, arg) in entries:
            if kind == "copy":
                fin.seek(data_start + arg[0])
                n = arg[1] - arg[0]
                while n > 0:
                    chunk = fin.read(min(n, BLOCK))
                    f.write(chunk)
                    n -= len(chunk)
            elif kind == "scales":
                f.write(SCALE_F16 * (arg // 2))
            else:
                n = arg
                while n > 0:
                    m = min(n, BLOCK - pos)
                    f.write(block[pos:pos + m])
                    pos = (pos + m) % BLOCK
                    n -= m
    with open(os.path.join(src, "config.json")) as f:
        cfg = json.load(f)
    cfg["quantization"] = quant
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    print(f"{out}: trellis k={k}, {off / 1e9:.2f} GB")


if __name__ == "__main__":
    main()
