"""ctypes bindings of libkvq_capi.so (capi/include/kvq/capi.h) and the error mapping.

The library is the package's only compiled part and has no Python in it, so one build serves
every Python version (docs/python.md). It lives in ``kvq/lib`` beside this file, with
libkvq_core, its shared libraries and ``kvq/lib/kvq/plugins``, which libkvq_core searches
(beside itself) without environment variables.
"""

from __future__ import annotations

import ctypes
import os
from ctypes import POINTER, c_char_p, c_float, c_int32, c_int64, c_void_p
from typing import NoReturn

from ._errors import raise_for

LIB_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib")
_CAPI_VERSION = 1


def _load() -> ctypes.CDLL:
    path = os.path.join(LIB_DIR, "libkvq_capi.so")
    if not os.path.isfile(path):
        raise ImportError(
            f"kvq: {path} is missing: expected the C API library installed with the package "
            "(pip install ./python builds it)"
        )
    # RTLD_LOCAL (ctypes' default): kvq's C++ symbols stay out of the process's global scope,
    # where they could meet another copy of spdlog or fmt (torch brings its own).
    lib = ctypes.CDLL(path)
    lib.kvq_capi_version.restype = c_int32
    found = lib.kvq_capi_version()
    if found != _CAPI_VERSION:
        raise ImportError(f"kvq: {path} has C API version {found}: expected {_CAPI_VERSION}")
    return lib


lib = _load()

_status = c_int32
_sigs = {
    "kvq_capi_kvq_version": (c_char_p, []),
    "kvq_capi_last_error_message": (c_char_p, []),
    "kvq_capi_last_error_key": (c_char_p, []),
    "kvq_capi_string_free": (None, [c_void_p]),
    "kvq_capi_set_log_level": (_status, [c_char_p]),
    "kvq_capi_config_load": (_status, [c_char_p, POINTER(c_void_p)]),
    "kvq_capi_config_parse": (_status, [c_char_p, c_char_p, POINTER(c_void_p)]),
    "kvq_capi_config_free": (None, [c_void_p]),
    "kvq_capi_config_json": (_status, [c_void_p, POINTER(c_void_p)]),
    "kvq_capi_backends_json": (_status, [c_void_p, POINTER(c_void_p)]),
    "kvq_capi_backend_open": (_status, [c_void_p, c_char_p, c_char_p, POINTER(c_void_p)]),
    "kvq_capi_backend_free": (None, [c_void_p]),
    "kvq_capi_backend_json": (_status, [c_void_p, POINTER(c_void_p)]),
    "kvq_capi_writer_create": (_status, [c_void_p, POINTER(c_void_p)]),
    "kvq_capi_writer_free": (None, [c_void_p]),
    "kvq_capi_writer_device": (c_char_p, [c_void_p]),
    # DLTensor* arguments cross as addresses (ints): the capsule path hands over the pointer
    # PyCapsule_GetPointer returned.
    "kvq_capi_writer_write": (
        _status,
        [c_void_p] * 5 + [c_float, c_float, c_void_p, c_void_p, c_void_p],
    ),
    "kvq_capi_writer_write_packed": (
        _status,
        [c_void_p, c_char_p, c_int64, c_float, c_float, c_void_p, c_void_p, c_void_p],
    ),
    "kvq_capi_writer_take_out_of_range_slots": (_status, [c_void_p, POINTER(c_int64)]),
    "kvq_capi_reader_create": (_status, [c_void_p, POINTER(c_void_p)]),
    "kvq_capi_reader_free": (None, [c_void_p]),
    "kvq_capi_reader_device": (c_char_p, [c_void_p]),
    "kvq_capi_reader_read": (_status, [c_void_p] * 5 + [c_float, c_float, c_void_p]),
    "kvq_capi_reader_read_packed": (
        _status,
        [c_void_p, c_char_p, c_int64, c_float, c_float, c_void_p],
    ),
    "kvq_capi_cache_file_save": (_status, [c_void_p, c_char_p, c_void_p, c_float, c_float]),
    "kvq_capi_cache_file_load": (
        _status,
        [c_void_p, c_char_p, c_void_p]
        + [POINTER(c_float), POINTER(c_int32), POINTER(c_float), POINTER(c_int32)],
    ),
}
for _name, (_restype, _argtypes) in _sigs.items():
    _fn = getattr(lib, _name)
    _fn.restype = _restype
    _fn.argtypes = _argtypes


def fail(code: int) -> NoReturn:
    """Raises the exception for a non-zero status, with the C++ message of this thread."""
    message = (lib.kvq_capi_last_error_message() or b"").decode("utf-8", "replace")
    key = (lib.kvq_capi_last_error_key() or b"").decode("utf-8", "replace")
    raise_for(code, message, key)


def check(code: int) -> None:
    if code != 0:
        fail(code)


def take_string(call, *args) -> str:
    """Calls a function that returns a malloc'd JSON string through its last argument."""
    out = c_void_p()
    check(call(*args, ctypes.byref(out)))
    try:
        return ctypes.string_at(out.value).decode("utf-8", "replace")
    finally:
        lib.kvq_capi_string_free(out)


def encode(text: str | os.PathLike[str]) -> bytes:
    return os.fsencode(text)
