#!/usr/bin/env python3
"""Writes an input file for `kvq write` (and the slot mapping `kvq read` takes): random key and
value rows [T, H, D] (BF16 by default) and slot_mapping [T] I64, tokens 0..T-1 on pages taken in
a shuffled order, in the safetensors format (an 8-byte header length, a JSON header, the bytes).
The defaults are configs/nvfp4_sm100.yaml's geometry. Needs only numpy (python3-numpy)."""
import argparse
import json
import struct
import sys

np = None  # numpy, imported after the arguments parse (so --help works without it)


def bf16_bits(x):
    """float32 -> bf16 bit patterns (uint16), round to nearest, ties to even (as PyTorch)."""
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    nan = np.isnan(x)
    rounded[nan] = (bits[nan] >> 16) | 0x40  # a NaN stays a quiet NaN
    return rounded.astype(np.uint16)


def save_safetensors(path, tensors):
    """tensors: name -> (safetensors dtype, numpy array holding exactly those bytes)."""
    header, blobs, offset = {}, [], 0
    for name, (dtype, array) in tensors.items():
        data = np.ascontiguousarray(array).tobytes()  # little-endian on x86 and arm
        header[name] = {"dtype": dtype, "shape": list(array.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def positive(text):
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, found '{text}'")
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, found '{text}'")
    return value


def non_negative(text):
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, found '{text}'")
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, found '{text}'")
    return value


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="make_kv.py", description=__doc__,
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        epilog="example: make_kv.py kv.safetensors --tokens 100 --dtype f32; exit status 0 "
               "success, 2 bad usage")
    p.add_argument("output", metavar="OUT.safetensors", help="file to write")
    p.add_argument("--tokens", "-T", type=positive, default=64, metavar="T",
                   help="tokens (rows) to write")
    p.add_argument("--heads", type=positive, default=8, metavar="H",
                   help="KV heads (the config's cache.num_kv_heads)")
    p.add_argument("--head-size", type=positive, default=128, metavar="D",
                   help="elements per head row (cache.head_size)")
    p.add_argument("--block-size", type=positive, default=16, metavar="N",
                   help="tokens per page (cache.block_size)")
    p.add_argument("--num-blocks", type=positive, default=1024, metavar="N",
                   help="pages in the cache (cache.num_blocks)")
    p.add_argument("--dtype", choices=("bf16", "f16", "f32"), default="bf16",
                   help="dtype of key and value")
    p.add_argument("--seed", type=non_negative, default=0, help="seed of the rows and the pages")
    return p.parse_args(argv)


def main(argv):
    a = parse_args(argv)
    global np
    import numpy
    np = numpy
    if a.tokens > a.block_size * a.num_blocks:
        sys.stderr.write(f"make_kv.py: {a.tokens} tokens do not fit in {a.num_blocks} pages of "
                         f"{a.block_size}\n")
        return 2
    rng = np.random.default_rng(a.seed)
    pages = rng.permutation(a.num_blocks)  # a paged cache hands out pages in no particular order
    tokens = np.arange(a.tokens)
    slots = pages[tokens // a.block_size] * a.block_size + tokens % a.block_size
    shape = (a.tokens, a.heads, a.head_size)
    rows = {name: rng.standard_normal(shape, dtype=np.float32) for name in ("key", "value")}
    if a.dtype == "bf16":
        tensors = {n: ("BF16", bf16_bits(x)) for n, x in rows.items()}
    elif a.dtype == "f16":
        tensors = {n: ("F16", x.astype(np.float16)) for n, x in rows.items()}
    else:
        tensors = {n: ("F32", x) for n, x in rows.items()}
    tensors["slot_mapping"] = ("I64", slots.astype(np.int64))
    save_safetensors(a.output, tensors)
    print(f"{a.output}: key, value [{a.tokens}, {a.heads}, {a.head_size}] {a.dtype.upper()}, "
          f"slot_mapping [{a.tokens}] I64")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
