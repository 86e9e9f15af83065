"""A decode step with torch tensors on CUDA: allocate kvq's cache, write a prefill, write one
decode token per step inside a captured CUDA graph, read everything back and report the error.

    python examples/python/decode_step.py [--config configs/nvfp4_sm100.yaml]

Needs the kvq package (pip install ./python), torch and a CUDA device; says so and exits 0
without them."""

from __future__ import annotations

import argparse
import sys

import kvq


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", default="configs/nvfp4_sm100.yaml")
    ap.add_argument("--prompt", type=int, default=100, help="prefill tokens")
    ap.add_argument("--steps", type=int, default=20, help="decode steps (graph replays)")
    a = ap.parse_args()
    try:
        import torch
    except ImportError:
        print("decode_step: torch is not installed: skipped (pip install torch)")
        return 0
    if not torch.cuda.is_available():
        print("decode_step: torch sees no CUDA device: skipped")
        return 0

    cfg = kvq.load_config(a.config)
    c = cfg.to_dict()["cache"]
    heads, size, block = c["num_kv_heads"], c["head_size"], c["block_size"]
    backend = kvq.open_backend(cfg, device="cuda:0")  # the config's backend (auto: the GPU one)
    writer, reader = backend.writer(), backend.reader()
    cache = kvq.allocate_cache(cfg, device="cuda")  # uint8 [num_blocks, page_bytes]
    total = a.prompt + a.steps
    if total > c["num_blocks"] * block:
        print(f"decode_step: {total} tokens do not fit the cache of {c['num_blocks']} blocks")
        return 2

    torch.manual_seed(0)
    key = torch.randn(total, heads, size, device="cuda", dtype=torch.bfloat16)
    value = torch.randn_like(key)
    # One sequence on pages taken in reverse order (a block table, as an engine keeps one).
    pages = torch.arange(c["num_blocks"] - 1, -1, -1, device="cuda")
    positions = torch.arange(total, device="cuda")
    slots = pages[positions // block] * block + positions % block
    k_scale = torch.tensor([key.float().abs().max().item() / 2688], device="cuda")
    v_scale = torch.tensor([value.float().abs().max().item() / 2688], device="cuda")

    # Prefill: one direct write on torch's current stream.
    writer.write(key[: a.prompt], value[: a.prompt], cache, slots[: a.prompt], k_scale, v_scale)

    # Decode: the graph reads the token's rows and slot from static buffers.
    step_key = torch.empty(1, heads, size, device="cuda", dtype=torch.bfloat16)
    step_value = torch.empty_like(step_key)
    step_slot = torch.empty(1, device="cuda", dtype=torch.int64)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        writer.write(step_key, step_value, cache, step_slot, k_scale, v_scale)
    for t in range(a.prompt, total):
        step_key.copy_(key[t : t + 1])
        step_value.copy_(value[t : t + 1])
        step_slot.copy_(slots[t : t + 1])
        graph.replay()
    torch.cuda.synchronize()
    skipped = writer.take_out_of_range_slots()

    k_back, v_back = reader.read(cache, slots, k_scale=k_scale.item(), v_scale=v_scale.item())
    torch.cuda.synchronize()
    for name, want, got in (("K", key, k_back), ("V", value, v_back)):
        want = want.float()
        rel = ((got - want).norm() / want.norm()).item()
        print(f"decode_step: {name} relative error {rel:.4f}, max error "
              f"{(got - want).abs().max().item():.4f}")
    print(f"decode_step: backend {writer.backend}, {a.prompt} prefill + {a.steps} graph-replayed "
          f"decode tokens, {skipped} slots skipped")
    return 0 if skipped == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
