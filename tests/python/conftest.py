"""Shared by the package's tests: where the repository and the kvq tool are, and safetensors
inputs made by examples/make_kv.py (the same files the command-line tests use).

KVQ_BUILD_DIR names the build whose bin/kvq the bit-exactness tests compare with (default:
build/ of the repository)."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("KVQ_BUILD_DIR", ROOT / "build"))
CONFIG = ROOT / "configs" / "nvfp4_sm100.yaml"

_NUMPY = {"F32": np.float32, "F16": np.float16, "BF16": np.uint16, "I64": np.int64,
          "I32": np.int32, "U8": np.uint8}


def read_safetensors(path: Path) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """The tensors (BF16 as its uint16 bits) and __metadata__ of a safetensors file."""
    data = path.read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    meta = header.pop("__metadata__", {})
    body = data[8 + n :]
    out = {}
    for name, t in header.items():
        begin, end = t["data_offsets"]
        out[name] = np.frombuffer(body[begin:end], dtype=_NUMPY[t["dtype"]]).reshape(t["shape"])
    return out, meta


def make_kv(path: Path, dtype: str = "f32", tokens: int = 64, seed: int = 0) -> dict[str, np.ndarray]:
    subprocess.run(
        [sys.executable, str(ROOT / "examples" / "make_kv.py"), str(path), "--tokens",
         str(tokens), "--dtype", dtype, "--seed", str(seed)],
        check=True, capture_output=True,
    )
    return read_safetensors(path)[0]


@pytest.fixture(scope="session")
def kvq_tool() -> Path:
    tool = BUILD / "bin" / "kvq"
    if not tool.is_file():
        pytest.skip(f"{tool} is missing: the comparison with the kvq tool needs a built tree "
                    "(set KVQ_BUILD_DIR)")
    return tool


@pytest.fixture(scope="session")
def cfg():
    import kvq

    return kvq.load_config(CONFIG)
