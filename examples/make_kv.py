#!/usr/bin/env python3
"""Writes an input file for `kvq write` (and a slot mapping for `kvq read`): random key and value
rows [T, H, D] as F32 and slot_mapping [T] as I64 (tokens 0..T-1 on pages in a shuffled order),
in the safetensors format (an 8-byte header length, a JSON header, the raw bytes).

usage: make_kv.py OUT.safetensors [T H D BLOCK_SIZE NUM_BLOCKS]
       (default 64 8 128 16 1024: configs/nvfp4_sm100.yaml's geometry)
Needs only numpy (python3-numpy, which python3-matplotlib brings).
"""
import json
import struct
import sys

import numpy as np


def save_safetensors(path, tensors):
    header, blobs, offset = {}, [], 0
    for name, array in tensors.items():
        dtype = {np.float32: "F32", np.int64: "I64"}[array.dtype.type]
        data = np.ascontiguousarray(array).tobytes()  # little-endian on x86 and arm
        header[name] = {"dtype": dtype, "shape": list(array.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def main(argv):
    if len(argv) not in (2, 7):
        sys.stderr.write(__doc__)
        return 2
    t, h, d, block_size, num_blocks = (int(v) for v in (argv[2:] or [64, 8, 128, 16, 1024]))
    if t > block_size * num_blocks:
        sys.stderr.write(f"make_kv.py: T = {t} tokens do not fit in {num_blocks} pages of "
                         f"{block_size}\n")
        return 2
    rng = np.random.default_rng(0)
    pages = rng.permutation(num_blocks)  # a paged cache hands out pages in no particular order
    tokens = np.arange(t)
    slots = pages[tokens // block_size] * block_size + tokens % block_size
    save_safetensors(argv[1], {
        "key": rng.standard_normal((t, h, d), dtype=np.float32),
        "value": rng.standard_normal((t, h, d), dtype=np.float32),
        "slot_mapping": slots.astype(np.int64),
    })
    print(f"{argv[1]}: key, value [{t}, {h}, {d}] F32, slot_mapping [{t}] I64")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
