"""The package's API over the C API: configs, backends, writers, readers, caches, files."""

from __future__ import annotations

import ctypes
import json
import os
import sys
from dataclasses import dataclass
from typing import Any, Union

from . import _capi
from ._capi import check, encode, lib, take_string
from ._errors import InvalidArgumentError
from ._tensors import describe, torch_tensor_type

PathLike = Union[str, "os.PathLike[str]"]


class Config:
    """A checked kvq config (docs/config.md): every key, the layout's geometry and format rules.

    Read-only; the layout facts come from kvq's own PageLayout."""

    def __init__(self, handle: int) -> None:
        self._handle = ctypes.c_void_p(handle)
        self._info: dict[str, Any] = json.loads(take_string(lib.kvq_capi_config_json, self._handle))

    def __del__(self) -> None:
        handle = getattr(self, "_handle", None)
        if handle is not None and handle.value:
            lib.kvq_capi_config_free(handle)
            handle.value = None

    @property
    def source(self) -> str:
        """The file it was loaded from, or "<string>"."""
        return self._info["source"]

    @property
    def backend(self) -> str:
        """The config's `backend`: a plugin name or "auto"."""
        return self._info["backend"]

    @property
    def device(self) -> str:
        """The config's `device`: "auto", "cpu" or "cuda:N"."""
        return self._info["device"]

    @property
    def format(self) -> str:
        return self._info["cache"]["format"]

    @property
    def k_scale(self) -> float:
        """cache.k_scale (writes take their scale as an argument; pass this one there)."""
        return float(self._info["cache"]["k_scale"])

    @property
    def v_scale(self) -> float:
        return float(self._info["cache"]["v_scale"])

    @property
    def cache_shape(self) -> tuple[int, int]:
        """[num_blocks, page_bytes] of the uint8 cache tensor."""
        rows, cols = self._info["cache_shape"]
        return (int(rows), int(cols))

    @property
    def page_bytes(self) -> int:
        return int(self._info["page_bytes"])

    def to_dict(self) -> dict[str, Any]:
        """Everything known about the config and its layout (a fresh copy)."""
        return json.loads(json.dumps(self._info))

    def __repr__(self) -> str:
        c = self._info["cache"]
        return (
            f"kvq.Config({self.source!r}: {c['format']} {c['num_blocks']} blocks x "
            f"{c['block_size']} tokens x {c['num_kv_heads']} heads x {c['head_size']}, "
            f"backend {self.backend}, device {self.device})"
        )


def load_config(source: PathLike) -> Config:
    """Loads a config from a file path, or parses YAML text.

    A ``str`` holding a newline or starting with ``{`` is YAML text; any other ``str`` or
    ``os.PathLike`` is a path. Raises ValueError (kvq.InvalidArgumentError, NotFoundError) with
    kvq's FILE:LINE:COL message for a bad config, OSError (kvq.IOFailure) when it cannot be read."""
    out = ctypes.c_void_p()
    if isinstance(source, str) and ("\n" in source or source.lstrip().startswith("{")):
        check(lib.kvq_capi_config_parse(source.encode("utf-8"), b"<string>", ctypes.byref(out)))
    elif isinstance(source, (str, os.PathLike)):
        check(lib.kvq_capi_config_load(encode(source), ctypes.byref(out)))
    else:
        raise InvalidArgumentError(
            f"config: {type(source).__name__}: expected a path or YAML text (str or os.PathLike)"
        )
    return Config(out.value)


def _config(cfg: Config | PathLike) -> Config:
    return cfg if isinstance(cfg, Config) else load_config(cfg)


def cache_shape(cfg: Config | PathLike) -> tuple[int, int]:
    """The cache tensor's shape, (num_blocks, page_bytes)."""
    return _config(cfg).cache_shape


def page_bytes(cfg: Config | PathLike) -> int:
    """Bytes of one page (one block of block_size tokens, K and V)."""
    return _config(cfg).page_bytes


def layout(cfg: Config | PathLike) -> dict[str, Any]:
    """The page layout as a dict: the fields a cache file records (format, order, k_scales,
    v_scales, num_blocks, block_size, num_kv_heads, head_size, group_size, page_bytes, as
    strings), plus "regions": [{name, offset, bytes, arrangement}] in address order and
    "side_bytes" (page_bytes / 2: a page is [K side | V side])."""
    info = _config(cfg)._info
    out: dict[str, Any] = dict(info["layout"])
    out["regions"] = [dict(r) for r in info["regions"]]
    out["side_bytes"] = int(info["side_bytes"])
    return out


def allocate_cache(cfg: Config | PathLike, device: Any = None) -> Any:
    """A zeroed cache, uint8 [num_blocks, page_bytes].

    device None: a NumPy array. Otherwise a torch tensor on that device ("cuda", "cuda:1",
    torch.device, "cpu"); needs torch."""
    shape = _config(cfg).cache_shape
    if device is None:
        import numpy as np

        return np.zeros(shape, dtype=np.uint8)
    import torch

    return torch.zeros(shape, dtype=torch.uint8, device=device)


@dataclass(frozen=True)
class BackendInfo:
    """A plugin found on the search path and its probe: available here or why not."""

    name: str
    version: str
    file: str
    formats: str
    layouts: str
    input_dtypes: str
    available: bool
    score: int
    reason: str


@dataclass(frozen=True)
class PluginFailure:
    """A file that looked like a plugin but could not be used, and why."""

    file: str
    reason: str


def _backends_json(cfg: Config | PathLike | None) -> dict[str, Any]:
    handle = _config(cfg)._handle if cfg is not None else None
    return json.loads(take_string(lib.kvq_capi_backends_json, handle))


def backends(cfg: Config | PathLike | None = None) -> list[BackendInfo]:
    """Every backend plugin found (the config's plugin_paths, KVQ_PLUGIN_PATH, then the plugins
    installed with the package) with its probe result, as `kvq backends` lists them."""
    return [BackendInfo(**p) for p in _backends_json(cfg)["plugins"]]


def plugin_failures(cfg: Config | PathLike | None = None) -> list[PluginFailure]:
    """The files on the search path that could not be loaded as plugins, with the reason."""
    return [PluginFailure(**f) for f in _backends_json(cfg)["failures"]]


def _scale(value: Any, name: str) -> tuple[float, int]:
    """(value, 0) for a number; (1.0, address) for a 1-element f32 tensor read by the backend."""
    if type(value) is float:
        return value, 0
    torch_type = torch_tensor_type()
    if torch_type is not None and isinstance(value, torch_type):
        if value.numel() != 1 or value.dtype is not sys.modules["torch"].float32:
            raise InvalidArgumentError(
                f"{name}: tensor {list(value.shape)} {value.dtype}: expected one float32 element"
            )
        return 1.0, value.data_ptr()
    try:
        return float(value), 0
    except (TypeError, ValueError):
        raise InvalidArgumentError(
            f"{name}: {type(value).__name__}: expected a number or a 1-element float32 torch "
            "tensor"
        ) from None


_WRITE_NAMES = ("key", "value", "cache", "slot_mapping")
_WRITE_WRITABLE = (False, False, True, False)
_READ_NAMES = ("cache", "slot_mapping", "key", "value")
_READ_WRITABLE = (False, False, True, True)


class Writer:
    """Quantizes key/value rows into a cache (kvq::KVCacheWriter). Thread-safe."""

    def __init__(self, handle: int, backend: str, format: str = "") -> None:
        self._handle = ctypes.c_void_p(handle)
        self._backend = backend
        self._format = format
        self._device = lib.kvq_capi_writer_device(self._handle).decode()

    def __del__(self) -> None:
        handle = getattr(self, "_handle", None)
        if handle is not None and handle.value:
            lib.kvq_capi_writer_free(handle)
            handle.value = None

    @property
    def backend(self) -> str:
        return self._backend

    @property
    def device(self) -> str:
        """Where its tensors must live: "cpu" or "cuda:N"."""
        return self._device

    @property
    def format(self) -> str:
        """The cache format it writes: "nvfp4", "fp8_e4m3", "fp8_e5m2" or "bf16"."""
        return self._format

    def write(
        self,
        key: Any,
        value: Any,
        cache: Any,
        slot_mapping: Any,
        k_scale: Any = 1.0,
        v_scale: Any = 1.0,
        stream: Any = None,
    ) -> None:
        """Writes the rows of key and value ([T, H, D] bf16/f16/f32, any strides) into the
        slots slot_mapping names ([T] int64/int32: block * block_size + offset; < 0 skips the
        token) of cache (uint8 [num_blocks, page_bytes], contiguous), in place, without copying.

        k_scale, v_scale: dequantization scales, numbers, or 1-element float32 tensors on the
        writer's device read when the write runs (CUDA graphs replay the current value).
        stream: on CUDA, the stream to run on (int cudaStream_t, torch.cuda.Stream, CuPy stream,
        __cuda_stream__); None: torch's current stream for torch tensors, else the legacy
        default stream. The call returns once the work is queued.

        Every rule of the C++ contract is checked before any byte is written: a refused write
        raises ValueError (kvq.InvalidArgumentError / OutOfRangeError) with the C++ message and
        leaves the cache unchanged; RuntimeError for a failure while running."""
        words, handle, keep = describe(
            (key, value, cache, slot_mapping), _WRITE_NAMES, _WRITE_WRITABLE, stream
        )
        k, k_ptr = (k_scale, 0) if type(k_scale) is float else _scale(k_scale, "k_scale")
        v, v_ptr = (v_scale, 0) if type(v_scale) is float else _scale(v_scale, "v_scale")
        status = lib.kvq_capi_writer_write_packed(
            self._handle, words, len(words) >> 3, k, v, k_ptr, v_ptr, handle
        )
        del keep  # the DLPack exports, if any, end here
        if status:
            _capi.fail(status)

    def take_out_of_range_slots(self) -> int:
        """Slots >= num_blocks * block_size that GPU writes skipped since the last call
        (synchronizes with them; resets the count). Always 0 on the CPU, which refuses them."""
        count = ctypes.c_int64()
        check(lib.kvq_capi_writer_take_out_of_range_slots(self._handle, ctypes.byref(count)))
        return int(count.value)

    def __repr__(self) -> str:
        return f"kvq.Writer({self._backend} on {self._device})"


class Reader:
    """Dequantizes cache rows back to float32 (kvq::KVCacheReader). Thread-safe."""

    def __init__(self, handle: int, backend: str, cfg: Config) -> None:
        self._handle = ctypes.c_void_p(handle)
        self._backend = backend
        self._device = lib.kvq_capi_reader_device(self._handle).decode()
        self._rows = (cfg._info["cache"]["num_kv_heads"], cfg._info["cache"]["head_size"])

    def __del__(self) -> None:
        handle = getattr(self, "_handle", None)
        if handle is not None and handle.value:
            lib.kvq_capi_reader_free(handle)
            handle.value = None

    @property
    def backend(self) -> str:
        return self._backend

    @property
    def device(self) -> str:
        return self._device

    def read(
        self,
        cache: Any,
        slot_mapping: Any,
        key: Any = None,
        value: Any = None,
        k_scale: float = 1.0,
        v_scale: float = 1.0,
        stream: Any = None,
    ) -> tuple[Any, Any]:
        """Reads the slots' K and V rows into key and value (float32 [T, H, D], written in
        place) and returns them. key/value None: allocated like the cache (NumPy for a NumPy
        cache, torch on the cache's device for a torch one). Negative slots read as zeros.
        Errors and streams as for Writer.write."""
        if key is None or value is None:
            key, value = self._outputs(cache, slot_mapping, key, value)
        words, handle, keep = describe(
            (cache, slot_mapping, key, value), _READ_NAMES, _READ_WRITABLE, stream
        )
        status = lib.kvq_capi_reader_read_packed(
            self._handle, words, len(words) >> 3, float(k_scale), float(v_scale), handle
        )
        del keep
        if status:
            _capi.fail(status)
        return key, value

    def _outputs(self, cache: Any, slot_mapping: Any, key: Any, value: Any) -> tuple[Any, Any]:
        try:
            tokens = int(slot_mapping.shape[0])
        except (AttributeError, IndexError, TypeError):
            raise InvalidArgumentError(
                f"slot_mapping: {type(slot_mapping).__name__}: expected a [num_tokens] tensor"
            ) from None
        shape = (tokens, *self._rows)
        torch_type = torch_tensor_type()
        if torch_type is not None and isinstance(cache, torch_type):
            torch = sys.modules["torch"]
            make = lambda: torch.empty(shape, dtype=torch.float32, device=cache.device)  # noqa: E731
        else:
            import numpy as np

            make = lambda: np.empty(shape, dtype=np.float32)  # noqa: E731
        return (make() if key is None else key, make() if value is None else value)

    def __repr__(self) -> str:
        return f"kvq.Reader({self._backend} on {self._device})"


class Backend:
    """An opened backend plugin (kvq::open_backend): makes writers and readers for the config."""

    def __init__(self, cfg: Config, handle: int) -> None:
        self._cfg = cfg
        self._handle = ctypes.c_void_p(handle)
        info = json.loads(take_string(lib.kvq_capi_backend_json, self._handle))
        self.info = BackendInfo(**info)

    def __del__(self) -> None:
        handle = getattr(self, "_handle", None)
        if handle is not None and handle.value:
            lib.kvq_capi_backend_free(handle)
            handle.value = None

    @property
    def name(self) -> str:
        return self.info.name

    @property
    def config(self) -> Config:
        return self._cfg

    def writer(self) -> Writer:
        """A writer for the config's cache on the backend's device."""
        out = ctypes.c_void_p()
        check(lib.kvq_capi_writer_create(self._handle, ctypes.byref(out)))
        return Writer(out.value, self.name, self._cfg.format)

    def reader(self) -> Reader:
        """A reader for the config's cache on the backend's device."""
        out = ctypes.c_void_p()
        check(lib.kvq_capi_reader_create(self._handle, ctypes.byref(out)))
        return Reader(out.value, self.name, self._cfg)

    def __repr__(self) -> str:
        return f"kvq.Backend({self.name} {self.info.version})"


def open_backend(
    cfg: Config | PathLike, backend: str | None = None, device: str | None = None
) -> Backend:
    """Finds the plugins (the config's plugin_paths, KVQ_PLUGIN_PATH, then those installed with
    the package) and opens one: ``backend`` by name, or None for the config's `backend` (auto
    unless the config names one: the available plugin with the highest probe score). ``device``
    ("cpu", "cuda:N", "auto") overrides the config's. Raises ValueError for a name no plugin has,
    RuntimeError (kvq.UnavailableError) for one that cannot run here, with the probe's reason."""
    config = _config(cfg)
    out = ctypes.c_void_p()
    check(
        lib.kvq_capi_backend_open(
            config._handle,
            None if backend is None else backend.encode("utf-8"),
            None if device is None else str(device).encode("utf-8"),
            ctypes.byref(out),
        )
    )
    return Backend(config, out.value)


@dataclass(frozen=True)
class CacheFile:
    """A cache file's pages and the scales it records (None when it records none)."""

    cache: Any
    k_scale: float | None
    v_scale: float | None


def _host_cache(cache: Any) -> Any:
    torch_type = torch_tensor_type()
    if torch_type is not None and isinstance(cache, torch_type) and cache.is_cuda:
        return cache.cpu()  # a file is written from host memory
    return cache


def save_cache_file(
    path: PathLike, cfg: Config | PathLike, cache: Any, k_scale: float = 1.0, v_scale: float = 1.0
) -> None:
    """Writes cache (uint8 [num_blocks, page_bytes] in cfg's layout; a CUDA tensor is copied to
    the host first) to path as kvq's safetensors cache file -- `kvq_cache` with the layout and
    the scales in __metadata__, the file `kvq write --output` writes and `kvq read --cache`
    reads -- whole or not at all."""
    config = _config(cfg)
    words, _, keep = describe((_host_cache(cache),), ("cache",), (False,), None)
    tensor = _words_to_dltensor(words)
    check(
        lib.kvq_capi_cache_file_save(
            config._handle, encode(path), ctypes.addressof(tensor), float(k_scale), float(v_scale)
        )
    )
    del keep


def load_cache_file(path: PathLike, cfg: Config | PathLike, cache: Any = None) -> CacheFile:
    """Reads a kvq cache file, checking its recorded layout against cfg's. The pages go into
    cache when given (host memory, uint8 [num_blocks, page_bytes], contiguous), else into a new
    NumPy array."""
    config = _config(cfg)
    if cache is None:
        cache = allocate_cache(config)
    words, _, keep = describe((cache,), ("cache",), (True,), None)
    tensor = _words_to_dltensor(words)
    k, v = ctypes.c_float(), ctypes.c_float()
    has_k, has_v = ctypes.c_int32(), ctypes.c_int32()
    check(
        lib.kvq_capi_cache_file_load(
            config._handle, encode(path), ctypes.addressof(tensor), ctypes.byref(k),
            ctypes.byref(has_k), ctypes.byref(v), ctypes.byref(has_v),
        )
    )
    del keep
    return CacheFile(cache, k.value if has_k.value else None, v.value if has_v.value else None)


def _words_to_dltensor(words: bytes) -> Any:
    """One packed tensor as a DLTensor (shape and strides owned by the returned object)."""
    from ._tensors import DLTensor

    n = len(words) >> 3
    w = (ctypes.c_int64 * n).from_buffer_copy(words)
    ndim = w[5]
    shape = (ctypes.c_int64 * max(ndim, 1))(*w[6 : 6 + ndim])
    strides = (ctypes.c_int64 * max(ndim, 1))(*w[6 + ndim : 6 + 2 * ndim])
    t = DLTensor()
    t.data = w[0]
    t.device.device_type, t.device.device_id = w[1], w[2]
    t.ndim = ndim
    t.dtype.code, t.dtype.bits, t.dtype.lanes = w[3], w[4], 1
    t.shape = ctypes.cast(shape, ctypes.POINTER(ctypes.c_int64))
    t.strides = ctypes.cast(strides, ctypes.POINTER(ctypes.c_int64))
    t._keep = (shape, strides)  # type: ignore[attr-defined]
    return t


def set_log_level(level: str) -> None:
    """kvq's log level: trace, debug, info, warn, error or off (KVQ_LOG_LEVEL, when set, wins).
    Log lines go to stderr."""
    check(lib.kvq_capi_set_log_level(level.encode("utf-8")))


def kvq_version() -> str:
    return lib.kvq_capi_kvq_version().decode()
