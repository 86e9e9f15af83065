"""The package on the CPU backend with NumPy: the issue's smallest use, bit-exactness with the
kvq tool, every bad argument's exception and message, no reference leaks, refused writes
leaving the cache unchanged, configs, backends and cache files."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import kvq
from conftest import CONFIG, ROOT, make_kv, read_safetensors


@pytest.fixture(scope="module")
def writer(cfg):
    return kvq.open_backend(cfg, backend="reference_cpu").writer()


@pytest.fixture(scope="module")
def reader(cfg):
    return kvq.open_backend(cfg, backend="reference_cpu").reader()


@pytest.fixture()
def rows():
    rng = np.random.default_rng(1)
    key = rng.standard_normal((4, 8, 128), dtype=np.float32)
    value = rng.standard_normal((4, 8, 128), dtype=np.float32)
    return key, value, np.array([0, 1, 17, 33], dtype=np.int64)


def test_smallest_use(tmp_path):
    # Exactly the lines, run from the repository root as a tool outside would.
    script = """
import numpy as np
import kvq
cfg = kvq.load_config("configs/nvfp4_sm100.yaml")
w = kvq.open_backend(cfg, backend="reference_cpu").writer()
cache = kvq.allocate_cache(cfg)
key = np.ones((2, 8, 128), np.float32); value = -key
slot_mapping = np.array([3, 40], np.int32)
w.write(key, value, cache, slot_mapping, k_scale=1.0, v_scale=1.0)
assert cache.dtype == np.uint8 and cache.shape == (1024, 18432) and cache.any()
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


@pytest.mark.parametrize("dtype", ["f32", "f16"])
def test_bit_exact_with_kvq_write(tmp_path, kvq_tool, cfg, writer, dtype):
    inputs = make_kv(tmp_path / "kv.safetensors", dtype=dtype, tokens=100, seed=7)
    expected = tmp_path / "cache.safetensors"
    subprocess.run(
        [str(kvq_tool), "write", str(CONFIG), "--input", str(tmp_path / "kv.safetensors"),
         "--output", str(expected), "--backend", "reference_cpu"],
        check=True, capture_output=True,
    )
    want = read_safetensors(expected)[0]["kv_cache"]
    cache = kvq.allocate_cache(cfg)
    writer.write(inputs["key"], inputs["value"], cache, inputs["slot_mapping"],
                 k_scale=cfg.k_scale, v_scale=cfg.v_scale)
    assert np.array_equal(cache, want)
    # The package's own cache file is the tool's byte for byte, and reads back.
    ours = tmp_path / "ours.safetensors"
    kvq.save_cache_file(ours, cfg, cache, cfg.k_scale, cfg.v_scale)
    assert ours.read_bytes() == expected.read_bytes()
    loaded = kvq.load_cache_file(expected, cfg)
    assert np.array_equal(loaded.cache, want) and loaded.k_scale == cfg.k_scale


def test_read_back(cfg, writer, reader, rows):
    key, value, slots = rows
    cache = kvq.allocate_cache(cfg)
    writer.write(key, value, cache, slots)
    k, v = reader.read(cache, slots)
    assert k.shape == key.shape and k.dtype == np.float32
    rel = np.linalg.norm(k - key) / np.linalg.norm(key)
    assert 0 < rel < 0.15  # NVFP4's round trip on normal rows: about 0.09
    k2 = np.empty_like(k)
    v2 = np.empty_like(v)
    assert reader.read(cache, slots, k2, v2)[0] is k2
    assert np.array_equal(k2, k) and np.array_equal(v2, v)


def test_strided_and_int32_and_dlpack(cfg, writer, rows):
    key, value, slots = rows
    want = kvq.allocate_cache(cfg)
    writer.write(key, value, want, slots)
    # A non-contiguous view, int32 slots and an object that only has __dlpack__.
    wide = np.zeros((4, 8, 256), np.float32)
    wide[:, :, ::2] = key

    class OnlyDLPack:
        def __init__(self, a):
            self._a = a

        def __dlpack__(self, stream=None):
            return self._a.__dlpack__()

        def __dlpack_device__(self):
            return self._a.__dlpack_device__()

    got = kvq.allocate_cache(cfg)
    writer.write(wide[:, :, ::2], OnlyDLPack(value), OnlyDLPack(got), slots.astype(np.int32))
    assert np.array_equal(got, want)


def _refused(writer, cfg, args, kwargs, exc, message):
    cache = kvq.allocate_cache(cfg)
    cache[:] = 0x5A
    before = cache.copy()
    call_args = list(args)
    call_args[2] = cache if call_args[2] is None else call_args[2]
    with pytest.raises(exc) as info:
        writer.write(*call_args, **kwargs)
    assert message in str(info.value), str(info.value)
    assert np.array_equal(cache, before), "a refused write changed the cache"
    return info.value


def test_bad_arguments_raise_the_cpp_message(cfg, writer, rows):
    key, value, slots = rows
    cases = [
        # (args with the cache None = a fresh one, kwargs, exception, part of the C++ message)
        ((key[:, :4], value, None, slots), {}, ValueError, "key"),
        ((key, value[:3], None, slots), {}, ValueError, "value"),
        ((key, value.astype(np.float16), None, slots), {}, ValueError, "value"),
        ((key.astype(np.float64), value, None, slots), {}, ValueError,
         "key: DLPack dtype (code 2, 64 bits) is not supported"),
        ((key, value, None, slots.astype(np.float32)), {}, ValueError, "slot_mapping"),
        ((key, value, None, slots[:3]), {}, ValueError, "slot_mapping"),
        ((key, value, None, np.array([0, 1, 2, 1 << 40], np.int64)), {}, ValueError,
         "slot_mapping[3] = 1099511627776: expected < 16384"),
        ((key, value, None, np.array([0, 1, 2, 1], np.int64)), {}, ValueError, "slot_mapping"),
        ((key, value, np.zeros((1024, 100), np.uint8), slots), {}, ValueError, "cache"),
        ((key, value, np.zeros((1024, 18432), np.int8), slots), {}, ValueError, "cache"),
        ((key, value, None, slots), {"k_scale": 0.0}, ValueError, "k_scale"),
        ((key, value, None, slots), {"v_scale": float("nan")}, ValueError, "v_scale"),
        ((key, value, None, slots), {"k_scale": "x"}, ValueError, "k_scale"),
        (("key", value, None, slots), {}, ValueError, "key: str: expected a tensor"),
        ((key, value, None, slots), {"stream": "s"}, ValueError, "stream: str"),
    ]
    for args, kwargs, exc, message in cases:
        _refused(writer, cfg, args, kwargs, exc, message)


def test_errors_name_the_code_and_key(cfg, writer, rows):
    key, value, slots = rows
    e = _refused(writer, cfg, (key, value, None, np.array([0, 1, 2, 1 << 40])), {},
                 kvq.OutOfRangeError, "slot_mapping")
    assert e.code == "out_of_range" and isinstance(e, kvq.Error)
    with pytest.raises(kvq.InvalidArgumentError) as info:
        kvq.load_config("cache:\n  format: nvfp4\n  num_blocks: 0\n")
    assert "<string>:3:15: cache.num_blocks" in str(info.value)
    assert info.value.key == "cache.num_blocks"
    with pytest.raises(kvq.NotFoundError, match="no such config file"):
        kvq.load_config("/nonexistent/kvq.yaml")
    with pytest.raises(ValueError, match="no backend named 'nope'"):
        kvq.open_backend(cfg, backend="nope")
    with pytest.raises(ValueError, match="device 'gpu7'"):
        kvq.open_backend(cfg, backend="reference_cpu", device="gpu7")
    with pytest.raises(ValueError, match="expected a path or YAML text"):
        kvq.load_config(42)
    with pytest.raises(ValueError, match="a read-only array"):
        cache = kvq.allocate_cache(cfg)
        cache.setflags(write=False)
        writer.write(key, value, cache, slots)


def test_no_reference_leak(cfg, writer, rows):
    key, value, slots = rows
    cache = kvq.allocate_cache(cfg)
    bad = np.array([0, 1, 2, 1 << 40], np.int64)
    before = [sys.getrefcount(x) for x in (key, value, cache, bad)]
    for _ in range(10_000):
        try:
            writer.write(key, value, cache, bad)
        except ValueError:
            pass
    assert [sys.getrefcount(x) for x in (key, value, cache, bad)] == before
    # The DLPack path too: its capsules are released after each call.
    class OnlyDLPack:
        def __init__(self, a):
            self._a = a

        def __dlpack__(self, stream=None):
            return self._a.__dlpack__()

        def __dlpack_device__(self):
            return self._a.__dlpack_device__()

    wrapped = OnlyDLPack(key)
    before = [sys.getrefcount(x) for x in (key, wrapped)]
    for _ in range(10_000):
        try:
            writer.write(wrapped, value, cache, bad)
        except ValueError:
            pass
    assert [sys.getrefcount(x) for x in (key, wrapped)] == before


def test_config_helpers(cfg):
    assert kvq.cache_shape(cfg) == (1024, 18432) == cfg.cache_shape
    assert kvq.page_bytes(CONFIG) == 18432
    lay = kvq.layout(cfg)
    assert lay["format"] == "nvfp4" and lay["v_scales"] == "sm100_swizzled"
    assert lay["side_bytes"] * 2 == 18432
    assert [r["name"] for r in lay["regions"]] == ["K data", "K scales", "V data", "V scales"]
    text = (ROOT / "configs" / "nvfp4_sm100.yaml").read_text()
    assert kvq.load_config(text).cache_shape == (1024, 18432)
    assert kvq.load_config(text).source == "<string>"
    cache = kvq.allocate_cache(cfg)
    assert cache.shape == (1024, 18432) and cache.dtype == np.uint8 and not cache.any()


def test_backends_listed_with_probe():
    found = {b.name: b for b in kvq.backends()}
    assert found["reference_cpu"].available and found["reference_cpu"].score == 10
    assert "nvfp4" in found["reference_cpu"].formats
    assert isinstance(kvq.plugin_failures(), list)
    # The installed package finds its own plugins without KVQ_PLUGIN_PATH.
    assert "/kvq/lib/kvq/plugins/" in found["reference_cpu"].file


def test_cache_file_layout_checked(tmp_path, cfg):
    path = tmp_path / "c.safetensors"
    kvq.save_cache_file(path, cfg, kvq.allocate_cache(cfg), 0.5, 0.25)
    f = kvq.load_cache_file(path, cfg)
    assert (f.k_scale, f.v_scale) == (0.5, 0.25)
    other = kvq.load_config(str(ROOT / "configs" / "nvfp4_nhd.yaml"))
    with pytest.raises(ValueError, match="layout differs"):
        kvq.load_cache_file(path, other)
    with pytest.raises(ValueError, match="cache: "):
        kvq.save_cache_file(path, cfg, np.zeros((3, 3), np.uint8))


FP8_YAML = """
backend: reference_cpu
cache:
  format: {fmt}
  num_blocks: 4
  block_size: 16
  num_kv_heads: 2
  head_size: 64
"""


@pytest.mark.parametrize(
    "fmt,one",
    [("fp8_e4m3", b"\x38"), ("fp8_e5m2", b"\x3c"), ("bf16", b"\x80\x3f")],
)
def test_element_formats_write_their_codes(fmt, one):
    """A YAML string config in each per-element format: ones become the format's code for 1
    (docs/format.md's worked vectors), K rows first in the HND page, V rows after the K side."""
    cfg = kvq.load_config(FP8_YAML.format(fmt=fmt))
    w = kvq.open_backend(cfg).writer()
    assert w.format == fmt
    cache = kvq.allocate_cache(cfg)
    key = np.ones((1, 2, 64), np.float32)
    w.write(key, key, cache, np.array([17], np.int64))
    row = 64 * len(one)
    page = cache[1].tobytes()  # slot 17 = block 1, token 1
    side = len(page) // 2
    assert page[row : 2 * row] == one * 64  # K, head 0, token 1 (HND: h * 16 + t)
    assert page[side + row : side + 2 * row] == one * 64
    assert kvq.page_bytes(cfg) == 2 * 16 * 2 * row
    if fmt == "bf16":
        with pytest.raises(ValueError, match="bf16 pages are not scaled"):
            w.write(key, key, cache, np.array([3], np.int64), k_scale=0.5)
