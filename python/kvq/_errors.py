"""kvq's errors as Python exceptions: one class per C++ ``kvq::ErrorCode``, each also a built-in
exception (``ValueError`` for bad arguments, ``RuntimeError`` for runtime failures, ``OSError``
for file I/O), so callers can catch either. The message is the C++ one, unchanged."""

from __future__ import annotations

from typing import NoReturn


class Error(Exception):
    """Base of every kvq error. ``code`` is the C++ ErrorCode's name ("invalid_argument"), ``key``
    the config key at fault ("cache.head_size") or ""."""

    code: str = "internal"
    key: str = ""


class InvalidArgumentError(Error, ValueError):
    """Bad input from the caller: a shape, dtype, stride, value, config or file content."""

    code = "invalid_argument"


class OutOfRangeError(Error, ValueError):
    """An index (a slot) past its bound."""

    code = "out_of_range"


class NotFoundError(Error, ValueError):
    """A file, backend or tensor that does not exist."""

    code = "not_found"


class UnavailableError(Error, RuntimeError):
    """A backend that cannot run here (no CUDA device, ...)."""

    code = "unavailable"


class IOFailure(Error, OSError):
    """Reading or writing a file failed."""

    code = "io"


class RuntimeFailure(Error, RuntimeError):
    """A failure while running (a CUDA error, ...)."""

    code = "runtime"


class InternalError(Error, RuntimeError):
    """A bug in kvq."""

    code = "internal"


_BY_CODE = {
    1: InvalidArgumentError,
    2: OutOfRangeError,
    3: NotFoundError,
    4: UnavailableError,
    5: IOFailure,
    6: RuntimeFailure,
    7: InternalError,
}


def raise_for(code: int, message: str, key: str = "") -> NoReturn:
    # One argument only: OSError reads two as (errno, strerror).
    error = _BY_CODE.get(code, InternalError)(message)
    error.key = key
    try:
        raise error
    finally:
        del error  # no frame -> exception -> traceback -> frame cycle left for the GC
