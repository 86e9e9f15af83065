"""kvq: write LLM key/value rows into an NVFP4 paged KV cache, from Python.

    import kvq
    cfg = kvq.load_config("configs/nvfp4_sm100.yaml")           # a path, or YAML text
    w = kvq.open_backend(cfg, backend="reference_cpu").writer()  # None: the config's (auto)
    cache = kvq.allocate_cache(cfg)                              # NumPy uint8 [num_blocks, page_bytes]
    w.write(key, value, cache, slot_mapping, k_scale=1.0, v_scale=1.0)

Tensors are taken without copying from torch, NumPy or anything with __dlpack__. The work is
done by kvq's C++ library and plugins, installed with the package (docs/python.md). The PyTorch
custom ops and a vLLM-style reshape_and_cache_flash are in kvq.torch_ops (needs torch).
"""

from ._api import (
    Backend,
    BackendInfo,
    CacheFile,
    Config,
    PluginFailure,
    Reader,
    Writer,
    allocate_cache,
    backends,
    cache_shape,
    kvq_version,
    layout,
    load_cache_file,
    load_config,
    open_backend,
    page_bytes,
    plugin_failures,
    save_cache_file,
    set_log_level,
)
from ._errors import (
    Error,
    InternalError,
    InvalidArgumentError,
    IOFailure,
    NotFoundError,
    OutOfRangeError,
    RuntimeFailure,
    UnavailableError,
)

__version__ = kvq_version()

__all__ = [
    "Backend", "BackendInfo", "CacheFile", "Config", "PluginFailure", "Reader", "Writer",
    "allocate_cache", "backends", "cache_shape", "kvq_version", "layout", "load_cache_file",
    "load_config", "open_backend", "page_bytes", "plugin_failures", "save_cache_file",
    "set_log_level", "Error", "InternalError", "InvalidArgumentError", "IOFailure",
    "NotFoundError", "OutOfRangeError", "RuntimeFailure", "UnavailableError", "__version__",
]
