"""Tensors from Python objects to the C API's packed words, without copying.

A tensor crosses as int64 words: [data, device_type, device_id, dtype_code, dtype_bits, ndim,
shape..., strides... (in elements)] (capi.h, kvq_capi_writer_write_packed). Three ways in:

- torch.Tensor: read directly (data_ptr, shape, stride, dtype, device): the decode fast path,
  about a microsecond per tensor, and the same memory __dlpack__ would export.
- numpy.ndarray: its __array_interface__ (read-only arrays are fine as inputs: NumPy 1.x's
  __dlpack__ refuses them).
- anything else with __dlpack__ (CuPy, JAX, ...): the DLPack capsule's DLTensor, borrowed for
  the call (the capsule, and so the producer's tensor, stay alive until the call returns).

Everything the C++ contract checks (shapes, dtypes, strides, devices, overlap) is left to it,
so the messages are the C++ ones; this module only says which argument could not be described.
"""

from __future__ import annotations

import ctypes
import struct
import sys
from typing import Any

from ._errors import InvalidArgumentError

KDL_CPU, KDL_CUDA, KDL_CUDA_HOST = 1, 2, 3
_INT, _UINT, _FLOAT, _BFLOAT, _COMPLEX, _BOOL = 0, 1, 2, 4, 5, 6

_torch_tensor_type: Any = None
_torch_dtypes: dict[Any, tuple[int, int]] = {}
_torch_raw_stream: Any = None


def torch_tensor_type() -> Any:
    """torch.Tensor once torch is imported (kvq never imports it itself), else None."""
    global _torch_tensor_type, _torch_raw_stream
    if _torch_tensor_type is None and "torch" in sys.modules:
        torch = sys.modules["torch"]
        tensor_type = getattr(torch, "Tensor", None)
        if tensor_type is None:  # torch is being imported right now
            return None
        for name, code in (
            ("float32", (_FLOAT, 32)), ("float16", (_FLOAT, 16)), ("bfloat16", (_BFLOAT, 16)),
            ("float64", (_FLOAT, 64)), ("uint8", (_UINT, 8)), ("int8", (_INT, 8)),
            ("int16", (_INT, 16)), ("int32", (_INT, 32)), ("int64", (_INT, 64)),
            ("bool", (_BOOL, 8)), ("complex64", (_COMPLEX, 64)), ("complex128", (_COMPLEX, 128)),
            ("float8_e4m3fn", (_FLOAT, 8)), ("uint16", (_UINT, 16)), ("uint32", (_UINT, 32)),
            ("uint64", (_UINT, 64)),
        ):
            if hasattr(torch, name):
                _torch_dtypes[getattr(torch, name)] = code
        # The raw cudaStream_t of the current stream without building a torch.cuda.Stream
        # (what torch's own compiled code calls); torch.cuda.current_stream() otherwise.
        _torch_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        _torch_tensor_type = tensor_type
    return _torch_tensor_type


def torch_current_stream(device_index: int) -> int:
    if _torch_raw_stream is not None:
        return _torch_raw_stream(device_index)
    torch = sys.modules["torch"]
    return torch.cuda.current_stream(device_index).cuda_stream


def torch_words(t: Any, words: list[int]) -> int:
    """Appends t's words; returns its CUDA device index, or -1 on the host."""
    shape = t.shape
    code = _torch_dtypes.get(t.dtype)
    if code is None:
        code = (255, t.element_size() * 8)  # refused by the contract, naming code and bits
    if t.is_cuda:
        index = t.get_device()
        words += (t.data_ptr(), KDL_CUDA, index, code[0], code[1], len(shape), *shape, *t.stride())
        return index
    words += (t.data_ptr(), KDL_CPU, 0, code[0], code[1], len(shape), *shape, *t.stride())
    return -1


_numpy_codes = {"f": _FLOAT, "i": _INT, "u": _UINT, "b": _BOOL, "c": _COMPLEX}


def numpy_words(a: Any, name: str, writable: bool, words: list[int]) -> None:
    if writable and not a.flags.writeable:
        raise InvalidArgumentError(f"{name}: a read-only array: expected a writable one")
    dtype = a.dtype
    if dtype.byteorder == ">" or (dtype.byteorder == "=" and sys.byteorder == "big"):
        raise InvalidArgumentError(f"{name}: dtype {dtype.str}: expected native byte order")
    code = _numpy_codes.get(dtype.kind)
    if code is None:
        code = _BFLOAT if dtype.name == "bfloat16" else 255  # ml_dtypes' bfloat16 is kind 'V'
    itemsize = dtype.itemsize
    strides = []
    for s in a.strides:
        if s % itemsize:
            raise InvalidArgumentError(
                f"{name}: stride of {s} bytes: expected a multiple of the element size {itemsize}"
            )
        strides.append(s // itemsize)
    data = a.__array_interface__["data"][0]
    words += (data, KDL_CPU, 0, code, itemsize * 8, a.ndim, *a.shape, *strides)


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_capsule_valid = ctypes.pythonapi.PyCapsule_IsValid
_capsule_valid.restype = ctypes.c_int
_capsule_valid.argtypes = [ctypes.py_object, ctypes.c_char_p]


def dlpack_words(obj: Any, name: str, stream: int | None, words: list[int], keep: list) -> int:
    """Appends the words of obj's DLPack export; returns its CUDA device index or -1.

    The capsule goes into ``keep``: its destructor frees the export once the caller drops it.
    ``stream`` is the consumer's stream for CUDA exports (the producer orders its work before
    it); None for host memory."""
    try:
        device_type, device_id = obj.__dlpack_device__()
    except Exception as e:  # noqa: BLE001 -- any failure of the producer says the same
        raise InvalidArgumentError(f"{name}: __dlpack_device__() failed: {e}") from None
    cuda = int(device_type) == KDL_CUDA
    try:
        if cuda:
            # DLPack: 1 is the legacy default stream, which a null handle means to CUDA.
            capsule = obj.__dlpack__(stream=stream if stream else 1)
        else:
            capsule = obj.__dlpack__()
    except Exception as e:  # noqa: BLE001
        raise InvalidArgumentError(f"{name}: __dlpack__() failed: {e}") from None
    if not _capsule_valid(capsule, b"dltensor"):
        raise InvalidArgumentError(
            f"{name}: __dlpack__() returned {type(capsule).__name__}: expected a 'dltensor' "
            "capsule (DLPack 0.x, not yet consumed)"
        )
    keep.append(capsule)
    # DLManagedTensor starts with its DLTensor.
    t = DLTensor.from_address(_capsule_pointer(capsule, b"dltensor"))
    ndim = t.ndim
    if ndim < 0 or ndim > 4:
        raise InvalidArgumentError(f"{name}: a DLPack tensor of {ndim} dimensions: expected 0..4")
    shape = [t.shape[i] for i in range(ndim)]
    if t.strides:
        strides = [t.strides[i] for i in range(ndim)]
    else:  # NULL: compact row-major
        strides, step = [0] * ndim, 1
        for i in range(ndim - 1, -1, -1):
            strides[i] = step
            step *= shape[i]
    if t.dtype.lanes != 1:
        raise InvalidArgumentError(f"{name}: DLPack tensor has {t.dtype.lanes} lanes: expected 1")
    data = (t.data or 0) + t.byte_offset
    words += (data, t.device.device_type, t.device.device_id, t.dtype.code, t.dtype.bits, ndim,
              *shape, *strides)
    return t.device.device_id if cuda else -1


def stream_handle(stream: Any) -> int:
    """A caller's stream as a cudaStream_t address: an int, torch.cuda.Stream (cuda_stream),
    CuPy's Stream (ptr), or an object with __cuda_stream__() -> (version, handle)."""
    if type(stream) is int:
        return stream
    for attr in ("cuda_stream", "ptr"):
        handle = getattr(stream, attr, None)
        if type(handle) is int:
            return handle
    protocol = getattr(stream, "__cuda_stream__", None)
    if protocol is not None:
        return int(protocol()[1])
    raise InvalidArgumentError(
        f"stream: {type(stream).__name__}: expected None, an int (cudaStream_t), "
        "torch.cuda.Stream, a CuPy stream or an object with __cuda_stream__"
    )


_packers: dict[int, struct.Struct] = {}


def pack(words: list[int]) -> bytes:
    n = len(words)
    packer = _packers.get(n)
    if packer is None:
        packer = _packers[n] = struct.Struct(f"={n}q")
    return packer.pack(*words)


def describe(
    tensors: tuple[Any, ...], names: tuple[str, ...], writable: tuple[bool, ...], stream: Any
) -> tuple[bytes, Any, Any]:
    """Packs the tensors of one call. Returns (words, stream handle, objects to keep alive).

    The stream: the caller's, else torch's current stream on the CUDA device of the first torch
    tensor there, else 0 (CUDA's legacy default stream; unused on the host)."""
    torch_type = torch_tensor_type()
    if torch_type is not None and stream is None:
        for t in tensors:
            if type(t) is not torch_type:
                break
        else:
            return describe_torch(tensors)
    return describe_any(tensors, names, writable, stream)


def describe_torch(tensors: tuple[Any, ...]) -> tuple[bytes, int, tuple]:
    """describe() of plain torch.Tensors on torch's current stream: the decode path, one loop
    with each tensor's attributes read once (get_device() is -1 on the host)."""
    words: list[int] = []
    index = -1
    dtypes = _torch_dtypes
    for t in tensors:
        shape = t.shape
        code = dtypes.get(t.dtype)
        if code is None:
            code = (255, t.element_size() * 8)  # refused by the contract, naming code and bits
        device = t.get_device()
        if device >= 0:
            if index < 0:
                index = device
            words += (t.data_ptr(), KDL_CUDA, device, code[0], code[1], len(shape), *shape,
                      *t.stride())
        else:
            words += (t.data_ptr(), KDL_CPU, 0, code[0], code[1], len(shape), *shape,
                      *t.stride())
    return pack(words), (torch_current_stream(index) if index >= 0 else 0), ()


def describe_any(
    tensors: tuple[Any, ...], names: tuple[str, ...], writable: tuple[bool, ...], stream: Any
) -> tuple[bytes, int, list]:
    """describe() of any mix of torch, NumPy and __dlpack__ objects, and a caller's stream."""
    words: list[int] = []
    keep: list = []
    handle = None if stream is None else stream_handle(stream)
    torch_type = torch_tensor_type()
    np = sys.modules.get("numpy")
    np_type = np.ndarray if np is not None else None
    deferred = []
    for t, name, w in zip(tensors, names, writable):
        if torch_type is not None and isinstance(t, torch_type):
            index = torch_words(t, words)
            if handle is None and index >= 0:
                handle = torch_current_stream(index)
        elif np_type is not None and isinstance(t, np_type):
            numpy_words(t, name, w, words)
        elif hasattr(t, "__dlpack__"):
            deferred.append(len(words))
            words.append((t, name))  # placeholder: the stream is known once every torch one is
        else:
            raise InvalidArgumentError(
                f"{name}: {type(t).__name__}: expected a tensor (torch.Tensor, numpy.ndarray or "
                "any object with __dlpack__)"
            )
    if handle is None:
        handle = 0
    if deferred:
        flat: list[int] = []
        at = 0
        for pos in deferred:
            flat += words[at:pos]
            t, name = words[pos]
            dlpack_words(t, name, handle, flat, keep)
            at = pos + 1
        flat += words[at:]
        words = flat
    return pack(words), handle, keep
