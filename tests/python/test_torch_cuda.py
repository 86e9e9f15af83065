"""torch CUDA tensors through the package: byte-equal to the C++ path, on a non-default stream,
inside a captured CUDA graph, through torch.ops.kvq and reshape_and_cache_flash. Skips with a
message where torch or a CUDA device is absent (tests/python/run_gpu_python.sh runs it on a GPU
machine, where KVQ_REQUIRE_GPU=1 turns the skip into a failure)."""

from __future__ import annotations

import os
import subprocess

import numpy as np
import pytest

import kvq
from conftest import CONFIG, make_kv, read_safetensors

torch = pytest.importorskip("torch", reason="torch is not installed: the torch tests skip")
if not torch.cuda.is_available():
    if os.environ.get("KVQ_REQUIRE_GPU") == "1":
        raise RuntimeError("KVQ_REQUIRE_GPU=1 but torch sees no CUDA device")
    pytest.skip("torch sees no CUDA device: the GPU tests skip", allow_module_level=True)

import kvq.torch_ops as kops  # noqa: E402


def _cuda_backend(cfg) -> str:
    """The available CUDA backend's name (whatever the plugin is called)."""
    names = [b.name for b in kvq.backends(cfg) if b.available and b.name != "reference_cpu"]
    if not names:
        pytest.fail(f"no available CUDA backend: {kvq.backends(cfg)}")
    return names[0]


@pytest.fixture(scope="module")
def gpu(cfg):
    backend = kvq.open_backend(cfg, backend=_cuda_backend(cfg), device="cuda:0")
    return backend.writer(), backend.reader()


@pytest.fixture(scope="module")
def cpu_writer(cfg):
    return kvq.open_backend(cfg, backend="reference_cpu").writer()


def _inputs(tmp_path, dtype="bf16", tokens=100, seed=3):
    arrays = make_kv(tmp_path / "kv.safetensors", dtype=dtype, tokens=tokens, seed=seed)
    key, value = (torch.from_numpy(arrays[n].copy()) for n in ("key", "value"))
    if dtype == "bf16":
        key, value = key.view(torch.bfloat16), value.view(torch.bfloat16)
    slots = torch.from_numpy(arrays["slot_mapping"].copy())
    return key.cuda(), value.cuda(), slots.cuda()


@pytest.mark.parametrize("dtype", ["bf16", "f16", "f32"])
def test_byte_equal_to_cpp(tmp_path, cfg, gpu, dtype):
    writer, _ = gpu
    key, value, slots = _inputs(tmp_path, dtype)
    cache = kvq.allocate_cache(cfg, device="cuda")
    writer.write(key, value, cache, slots, k_scale=cfg.k_scale, v_scale=cfg.v_scale)
    got = cache.cpu().numpy()
    # The C++ path: the kvq tool on the same file with the same backend, where it is built;
    # reference_cpu (every backend writes the same bytes) otherwise.
    tool = os.path.join(os.environ.get("KVQ_BUILD_DIR", "build"), "bin", "kvq")
    if os.path.isfile(tool):
        out = tmp_path / "cache.safetensors"
        subprocess.run([tool, "write", str(CONFIG), "--input", str(tmp_path / "kv.safetensors"),
                        "--output", str(out), "--backend", writer.backend], check=True)
        want = read_safetensors(out)[0]["kv_cache"]
    else:
        want = np.zeros(kvq.cache_shape(cfg), np.uint8)
        kops_cpu = kvq.open_backend(cfg, backend="reference_cpu").writer()
        kops_cpu.write(key.cpu(), value.cpu(), want, slots.cpu(), cfg.k_scale, cfg.v_scale)
    assert np.array_equal(got, want)


def test_refused_write_leaves_cache(tmp_path, cfg, gpu):
    writer, _ = gpu
    key, value, slots = _inputs(tmp_path)
    cache = torch.full(kvq.cache_shape(cfg), 0x5A, dtype=torch.uint8, device="cuda")
    with pytest.raises(ValueError, match="key"):
        writer.write(key[:, :4], value, cache, slots)
    with pytest.raises(ValueError):
        writer.write(key.cpu(), value, cache, slots)  # host key, device cache
    assert bool((cache == 0x5A).all())


def test_non_default_stream(tmp_path, cfg, gpu, cpu_writer):
    writer, reader = gpu
    key, value, slots = _inputs(tmp_path)
    want = np.zeros(kvq.cache_shape(cfg), np.uint8)
    cpu_writer.write(key.cpu(), value.cpu(), want, slots.cpu())
    side = torch.cuda.Stream()
    cache = kvq.allocate_cache(cfg, device="cuda")
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # the default: torch's current stream, here `side`
        writer.write(key, value, cache, slots)
    side.synchronize()
    assert np.array_equal(cache.cpu().numpy(), want)
    cache2 = kvq.allocate_cache(cfg, device="cuda")
    other = torch.cuda.Stream()
    other.wait_stream(torch.cuda.current_stream())
    writer.write(key, value, cache2, slots, stream=other)  # named explicitly
    other.synchronize()
    assert np.array_equal(cache2.cpu().numpy(), want)
    k, v = reader.read(cache2, slots)
    torch.cuda.synchronize()
    assert k.is_cuda and k.shape == key.shape


def test_graph_capture_and_device_scales(tmp_path, cfg, gpu, cpu_writer):
    writer, _ = gpu
    key, value, slots = _inputs(tmp_path, tokens=8)
    cache = kvq.allocate_cache(cfg, device="cuda")
    k_scale = torch.tensor([0.5], device="cuda")
    v_scale = torch.tensor([0.25], device="cuda")
    static_slots = slots.clone()
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        writer.write(key, value, cache, static_slots, k_scale, v_scale)  # warm up
        torch.cuda.current_stream().synchronize()
        cache.zero_()
        with torch.cuda.graph(graph, stream=stream):
            writer.write(key, value, cache, static_slots, k_scale, v_scale)
    torch.cuda.synchronize()
    assert not cache.any(), "capture ran the write"
    graph.replay()
    torch.cuda.synchronize()
    want = np.zeros(kvq.cache_shape(cfg), np.uint8)
    cpu_writer.write(key.cpu(), value.cpu(), want, slots.cpu(), 0.5, 0.25)
    assert np.array_equal(cache.cpu().numpy(), want)
    # The replay reads the scales' current values.
    k_scale.fill_(1.0)
    v_scale.fill_(1.0)
    graph.replay()
    torch.cuda.synchronize()
    cpu_writer.write(key.cpu(), value.cpu(), want, slots.cpu(), 1.0, 1.0)
    assert np.array_equal(cache.cpu().numpy(), want)
    assert writer.take_out_of_range_slots() == 0


def test_torch_ops_compile_and_reshape_and_cache_flash(tmp_path, cfg, gpu, cpu_writer):
    writer, _ = gpu
    key, value, slots = _inputs(tmp_path, tokens=16)
    want = np.zeros(kvq.cache_shape(cfg), np.uint8)
    cpu_writer.write(key.cpu(), value.cpu(), want, slots.cpu())

    cache = kvq.allocate_cache(cfg, device="cuda")
    wid = kops.register(writer)

    @torch.compile(fullgraph=True)
    def step(k, v, c, s):
        torch.ops.kvq.write(k * 1, v, c, s, 1.0, 1.0, wid)

    step(key, value, cache, slots)
    torch.cuda.synchronize()
    assert np.array_equal(cache.cpu().numpy(), want)

    cache2 = kvq.allocate_cache(cfg, device="cuda")
    key_cache, value_cache = kops.split_cache(cache2)
    rcf = kops.reshape_and_cache_flash_for(writer)
    one = torch.ones(1, device="cuda")
    rcf(key, value, key_cache, value_cache, slots, "nvfp4", one, one)
    torch.cuda.synchronize()
    assert np.array_equal(cache2.cpu().numpy(), want)
    with pytest.raises(ValueError, match="kv_cache_dtype 'fp8'"):
        rcf(key, value, key_cache, value_cache, slots, "fp8", one, one)
