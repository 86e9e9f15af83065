"""Host time of one decode write from Python over the same write from C++, on CUDA.

    python python/benchmarks/write_overhead.py [--tokens 1 --iters 20000 --json OUT.json]

Each call is one direct launch (no graph). The C++ figure is kvq_capi_writer_write_packed
called through ctypes with words packed once (the C++ contract check and the launch plus the bare
ctypes call, no other Python work); the
Python figures add what kvq.Writer.write does per call (reading the tensors, the current
stream, packing). Both are host time per call, the device running behind; the GPU is synced
every 256 calls so the launch queue never fills. Graph replay runs no Python at all: its cost is
the replay's, the same from Python and C++."""

from __future__ import annotations

import argparse
import ctypes
import json
import statistics
import sys
import time

import kvq
from kvq import _capi
from kvq._tensors import describe


def per_call_us(fn, iters: int, sync) -> float:
    for _ in range(200):
        fn()
    sync()
    best = []
    for _ in range(5):
        t0 = time.perf_counter_ns()
        for i in range(iters):
            fn()
            if (i & 255) == 255:
                sync()
        sync()
        best.append((time.perf_counter_ns() - t0) / iters / 1e3)
    return statistics.median(best)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", default="configs/nvfp4_sm100.yaml")
    ap.add_argument("--tokens", type=int, default=1, help="tokens per write (decode: 1)")
    ap.add_argument("--iters", type=int, default=20000)
    ap.add_argument("--json", help="write the numbers here")
    a = ap.parse_args()
    try:
        import torch
    except ImportError:
        print("write_overhead: torch is not installed: nothing measured")
        return 0
    if not torch.cuda.is_available():
        print("write_overhead: no CUDA device: nothing measured")
        return 0
    cfg = kvq.load_config(a.config)
    names = [b.name for b in kvq.backends(cfg) if b.available and b.name != "reference_cpu"]
    writer = kvq.open_backend(cfg, backend=names[0], device="cuda:0").writer()
    heads, size = cfg.to_dict()["cache"]["num_kv_heads"], cfg.to_dict()["cache"]["head_size"]
    key = torch.randn(a.tokens, heads, size, device="cuda", dtype=torch.bfloat16)
    value = torch.randn_like(key)
    slots = torch.arange(a.tokens, device="cuda", dtype=torch.int64)
    cache = kvq.allocate_cache(cfg, device="cuda")
    sync = torch.cuda.synchronize

    words, stream, _ = describe((key, value, cache, slots), ("key", "value", "cache", "slots"),
                                (False, False, True, False), None)
    raw = _capi.lib.kvq_capi_writer_write_packed
    handle = writer._handle
    n = len(words) >> 3
    cpp = per_call_us(lambda: raw(handle, words, n, 1.0, 1.0, None, None, stream), a.iters, sync)
    py = per_call_us(lambda: writer.write(key, value, cache, slots), a.iters, sync)
    k_scale = torch.ones(1, device="cuda")
    py_ts = per_call_us(lambda: writer.write(key, value, cache, slots, k_scale, k_scale),
                        a.iters, sync)
    import kvq.torch_ops as kops

    wid = kops.register(writer)
    op = torch.ops.kvq.write
    py_op = per_call_us(lambda: op(key, value, cache, slots, 1.0, 1.0, wid), a.iters, sync)
    # Where the Python time goes: each step of Writer.write alone, same tensors.
    from kvq import _tensors

    torch_tensor = _tensors.torch_tensor_type()
    nothing = lambda: None  # noqa: E731
    steps = {
        "loop_and_lambda_us": nothing,
        "ctypes_trivial_call_us": _capi.lib.kvq_capi_version,
        "current_stream_us": lambda: _tensors.torch_current_stream(0),
        "isinstance_us": lambda: isinstance(key, torch_tensor),
        "torch_words_one_tensor_us": lambda: _tensors.torch_words(key, []),
        "data_ptr_us": key.data_ptr,
        "shape_us": lambda: key.shape,
        "stride_us": key.stride,
        "dtype_us": lambda: key.dtype,
        "is_cuda_us": lambda: key.is_cuda,
        "get_device_us": key.get_device,
        "pack_us": lambda: _tensors.pack(list(range(len(words) >> 3))),
        "describe_four_tensors_us": lambda: describe(
            (key, value, cache, slots), ("key", "value", "cache", "slots"),
            (False, False, True, False), None),
        "describe_any_four_tensors_us": lambda: _tensors.describe_any(
            (key, value, cache, slots), ("key", "value", "cache", "slots"),
            (False, False, True, False), None),
    }
    breakdown = {name: per_call_us(fn, a.iters, nothing) for name, fn in steps.items()}
    result = {
        "device": torch.cuda.get_device_name(0), "backend": writer.backend,
        "python": sys.version.split()[0], "torch": torch.__version__, "tokens": a.tokens,
        "cpp_call_us": cpp, "python_write_us": py, "python_over_cpp_us": py - cpp,
        "python_write_tensor_scales_us": py_ts, "torch_ops_kvq_write_us": py_op,
        "breakdown": breakdown,
    }
    for k, v in {**result, **breakdown}.items():
        if k != "breakdown":
            print(f"{k:32} {v:.3f}" if isinstance(v, float) else f"{k:32} {v}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
