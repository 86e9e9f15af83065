#!/usr/bin/env python3
"""Writes a query file for `kvq attend` over the tokens examples/make_kv.py wrote: one sequence of
T tokens whose pages are the ones make_kv.py used (the same --tokens, --block-size, --num-blocks
and --seed give the same shuffled pages), query [1, Hq, D] BF16 random, block_tables [1, M] I32
and seq_lens [1] I32. Needs only numpy (python3-numpy)."""
import argparse
import sys

import make_kv


def parse_args(argv):
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("output", metavar="Q.safetensors", help="file to write")
    p.add_argument("--tokens", "-T", type=make_kv.positive, default=64, metavar="T",
                   help="tokens make_kv.py wrote: the sequence's length")
    p.add_argument("--heads", type=make_kv.positive, default=8, metavar="H",
                   help="num_kv_heads")
    p.add_argument("--group", type=make_kv.positive, default=4, metavar="G",
                   help="query heads per kv head (num_q_heads = H x G)")
    p.add_argument("--head-size", type=make_kv.positive, default=128, metavar="D")
    p.add_argument("--block-size", type=make_kv.positive, default=16, metavar="N")
    p.add_argument("--num-blocks", type=make_kv.positive, default=1024, metavar="N")
    p.add_argument("--seed", type=make_kv.non_negative, default=0,
                   help="make_kv.py's seed (the pages); the query uses seed + 1")
    return p.parse_args(argv)


def main(argv):
    a = parse_args(argv)
    import numpy as np
    make_kv.np = np
    if a.tokens > a.block_size * a.num_blocks:
        sys.stderr.write(f"make_query.py: {a.tokens} tokens do not fit in {a.num_blocks} pages "
                         f"of {a.block_size}\n")
        return 2
    pages = np.random.default_rng(a.seed).permutation(a.num_blocks)  # make_kv.py's first draw
    used = -(-a.tokens // a.block_size)
    query = np.random.default_rng(a.seed + 1).standard_normal(
        (1, a.heads * a.group, a.head_size), dtype=np.float32)
    make_kv.save_safetensors(a.output, {
        "query": ("BF16", make_kv.bf16_bits(query)),
        "block_tables": ("I32", pages[:used].astype(np.int32).reshape(1, used)),
        "seq_lens": ("I32", np.array([a.tokens], dtype=np.int32)),
    })
    print(f"{a.output}: query [1, {a.heads * a.group}, {a.head_size}] BF16, block_tables "
          f"[1, {used}] I32, seq_lens [1] I32 ({a.tokens} tokens)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
