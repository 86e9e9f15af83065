"""kvq's PyTorch face: custom ops under ``torch.ops.kvq`` and a vLLM-style
``reshape_and_cache_flash``. Importing this module imports torch and registers the ops.

Ops (registered with torch.library.custom_op, each with a fake implementation, so they sit inside
torch.compile graphs and CUDA graph captures; the caches and outputs are declared mutated):

    torch.ops.kvq.write(key, value, cache, slot_mapping, k_scale: float, v_scale: float,
                        writer: int) -> ()
    torch.ops.kvq.write_tensor_scales(key, value, cache, slot_mapping, k_scale: Tensor,
                                      v_scale: Tensor, writer: int) -> ()
    torch.ops.kvq.read(cache, slot_mapping, key_out, value_out, k_scale: float,
                       v_scale: float, reader: int) -> ()
    torch.ops.kvq.reshape_and_cache_flash(key, value, key_cache, value_cache, slot_mapping,
                                          kv_cache_dtype: str, k_scale: Tensor,
                                          v_scale: Tensor, writer: int) -> ()

``writer`` / ``reader`` is the id that register() gives a kvq.Writer / kvq.Reader (ops take
tensors and scalars only). Each runs on torch's current stream.

The cache is kvq's [num_blocks, page_bytes] uint8 tensor. A page is [K side | V side] of
page_bytes / 2 each, so vLLM's pair of caches maps onto it as two views:
``key_cache, value_cache = split_cache(cache)`` (cache.view(num_blocks, 2, side).unbind(1),
as vLLM unbinds its kv_cache), each [num_blocks, page_bytes / 2] with stride page_bytes.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from ._api import Reader, Writer
from ._errors import InvalidArgumentError

_writers: dict[int, Writer] = {}
_readers: dict[int, Reader] = {}


def register(obj: Writer | Reader) -> int:
    """The id the ops take for a writer or reader; it stays alive from then on."""
    if not isinstance(obj, (Writer, Reader)):
        raise InvalidArgumentError(
            f"register: {type(obj).__name__}: expected a kvq.Writer or kvq.Reader"
        )
    table: dict[int, Any] = _writers if isinstance(obj, Writer) else _readers
    table[id(obj)] = obj
    return id(obj)


def _writer(writer: int) -> Writer:
    w = _writers.get(writer)
    if w is None:
        raise InvalidArgumentError(
            f"writer {writer}: not an id from kvq.torch_ops.register(writer)"
        )
    return w


@torch.library.custom_op("kvq::write", mutates_args=("cache",))
def _write(
    key: torch.Tensor,
    value: torch.Tensor,
    cache: torch.Tensor,
    slot_mapping: torch.Tensor,
    k_scale: float,
    v_scale: float,
    writer: int,
) -> None:
    _writer(writer).write(key, value, cache, slot_mapping, k_scale, v_scale)


@_write.register_fake
def _write_fake(key, value, cache, slot_mapping, k_scale, v_scale, writer) -> None:
    return None


@torch.library.custom_op("kvq::write_tensor_scales", mutates_args=("cache",))
def _write_tensor_scales(
    key: torch.Tensor,
    value: torch.Tensor,
    cache: torch.Tensor,
    slot_mapping: torch.Tensor,
    k_scale: torch.Tensor,
    v_scale: torch.Tensor,
    writer: int,
) -> None:
    _writer(writer).write(key, value, cache, slot_mapping, k_scale, v_scale)


@_write_tensor_scales.register_fake
def _write_tensor_scales_fake(key, value, cache, slot_mapping, k_scale, v_scale, writer) -> None:
    return None


@torch.library.custom_op("kvq::read", mutates_args=("key_out", "value_out"))
def _read(
    cache: torch.Tensor,
    slot_mapping: torch.Tensor,
    key_out: torch.Tensor,
    value_out: torch.Tensor,
    k_scale: float,
    v_scale: float,
    reader: int,
) -> None:
    r = _readers.get(reader)
    if r is None:
        raise InvalidArgumentError(f"reader {reader}: not an id from kvq.torch_ops.register(reader)")
    r.read(cache, slot_mapping, key_out, value_out, k_scale, v_scale)


@_read.register_fake
def _read_fake(cache, slot_mapping, key_out, value_out, k_scale, v_scale, reader) -> None:
    return None


def split_cache(cache: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """vLLM's (key_cache, value_cache) views of kvq's cache: each [num_blocks, page_bytes / 2]
    uint8, the K and V halves of every page (no copy)."""
    if cache.dim() != 2 or cache.dtype != torch.uint8 or cache.shape[1] % 2:
        raise InvalidArgumentError(
            f"cache: {list(cache.shape)} {cache.dtype}: expected uint8 [num_blocks, page_bytes]"
        )
    blocks, page = cache.shape
    return cache.view(blocks, 2, page // 2).unbind(1)


def combined_cache(key_cache: torch.Tensor, value_cache: torch.Tensor) -> torch.Tensor:
    """kvq's [num_blocks, page_bytes] cache from vLLM's pair: either split_cache's two halves
    (value_cache starting page_bytes / 2 after key_cache, both of stride page_bytes), or the
    combined cache passed as both."""
    if key_cache.dtype != torch.uint8 or key_cache.dim() != 2 or value_cache.dim() != 2:
        raise InvalidArgumentError(
            f"key_cache: {list(key_cache.shape)} {key_cache.dtype}: expected uint8 "
            "[num_blocks, page_bytes / 2] (split_cache) or [num_blocks, page_bytes]"
        )
    if value_cache.data_ptr() == key_cache.data_ptr() and value_cache.shape == key_cache.shape:
        return key_cache  # the combined cache, passed twice
    blocks, side = key_cache.shape
    if (
        value_cache.shape != key_cache.shape
        or key_cache.stride() != (2 * side, 1)
        or value_cache.stride() != (2 * side, 1)
        or value_cache.data_ptr() != key_cache.data_ptr() + side
    ):
        raise InvalidArgumentError(
            f"key_cache {list(key_cache.shape)} stride {key_cache.stride()}, value_cache "
            f"{list(value_cache.shape)} stride {value_cache.stride()}: expected the two halves "
            "of one kvq cache (kvq.torch_ops.split_cache) or that cache twice"
        )
    return key_cache.as_strided((blocks, 2 * side), (2 * side, 1))


# vLLM's kv_cache_dtype words -> kvq's cache formats ("auto" keeps the model's bf16).
_FORMATS = {
    "nvfp4": "nvfp4",
    "fp8": "fp8_e4m3",
    "fp8_e4m3": "fp8_e4m3",
    "fp8_e5m2": "fp8_e5m2",
    "bf16": "bf16",
    "auto": "bf16",
}


@torch.library.custom_op(
    "kvq::reshape_and_cache_flash", mutates_args=("key_cache", "value_cache")
)
def _reshape_and_cache_flash(
    key: torch.Tensor,
    value: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
    kv_cache_dtype: str,
    k_scale: torch.Tensor,
    v_scale: torch.Tensor,
    writer: int,
) -> None:
    w = _writer(writer)
    if _FORMATS.get(kv_cache_dtype) != w.format:
        raise InvalidArgumentError(
            f"kv_cache_dtype '{kv_cache_dtype}': expected one naming the writer's format "
            f"{w.format} ({', '.join(k for k, v in _FORMATS.items() if v == w.format)})"
        )
    cache = combined_cache(key_cache, value_cache)
    w.write(key, value, cache, slot_mapping, k_scale, v_scale)


@_reshape_and_cache_flash.register_fake
def _reshape_and_cache_flash_fake(
    key, value, key_cache, value_cache, slot_mapping, kv_cache_dtype, k_scale, v_scale, writer
) -> None:
    return None


def write(
    writer: Writer,
    key: torch.Tensor,
    value: torch.Tensor,
    cache: torch.Tensor,
    slot_mapping: torch.Tensor,
    k_scale: float | torch.Tensor = 1.0,
    v_scale: float | torch.Tensor = 1.0,
) -> None:
    """writer.write through torch.ops.kvq (traceable by torch.compile)."""
    wid = register(writer) if id(writer) not in _writers else id(writer)
    if isinstance(k_scale, torch.Tensor) or isinstance(v_scale, torch.Tensor):
        ks = k_scale if isinstance(k_scale, torch.Tensor) else _scale_tensor(k_scale, key)
        vs = v_scale if isinstance(v_scale, torch.Tensor) else _scale_tensor(v_scale, key)
        torch.ops.kvq.write_tensor_scales(key, value, cache, slot_mapping, ks, vs, wid)
    else:
        torch.ops.kvq.write(key, value, cache, slot_mapping, float(k_scale), float(v_scale), wid)


def _scale_tensor(scale: float, like: torch.Tensor) -> torch.Tensor:
    return torch.full((1,), float(scale), dtype=torch.float32, device=like.device)


def reshape_and_cache_flash_for(writer: Writer) -> Callable[..., None]:
    """A function with vLLM's ``reshape_and_cache_flash(key, value, key_cache, value_cache,
    slot_mapping, kv_cache_dtype, k_scale, v_scale)`` arguments, writing with ``writer``:
    key/value [num_tokens, num_kv_heads, head_size]; key_cache/value_cache split_cache's halves
    of kvq's cache (or the cache twice); slot_mapping [num_tokens] (< 0: padding);
    kv_cache_dtype naming the writer's format (vLLM's words: "nvfp4", "fp8" / "fp8_e4m3",
    "fp8_e5m2", "auto" / "bf16"); k_scale/v_scale dequantization scales as
    float32 tensors of one element (read on the device: CUDA graphs replay current values) or
    floats."""
    wid = register(writer) if id(writer) not in _writers else id(writer)

    def reshape_and_cache_flash(
        key: torch.Tensor,
        value: torch.Tensor,
        key_cache: torch.Tensor,
        value_cache: torch.Tensor,
        slot_mapping: torch.Tensor,
        kv_cache_dtype: str,
        k_scale: float | torch.Tensor,
        v_scale: float | torch.Tensor,
    ) -> None:
        ks = k_scale if isinstance(k_scale, torch.Tensor) else _scale_tensor(k_scale, key)
        vs = v_scale if isinstance(v_scale, torch.Tensor) else _scale_tensor(v_scale, key)
        torch.ops.kvq.reshape_and_cache_flash(
            key, value, key_cache, value_cache, slot_mapping, kv_cache_dtype, ks, vs, wid
        )

    return reshape_and_cache_flash
