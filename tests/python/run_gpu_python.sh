#!/usr/bin/env bash
# The package's GPU checks on a machine with torch and a CUDA device, offline: installs the wheel
# built here (BUILD/python-dist, made by scripts/test.sh or tests/python/run_pytest.sh) into a
# fresh virtual environment that sees the machine's torch (--system-site-packages), then runs the
# Python tests (the torch CUDA ones included, failing rather than skipping without a GPU), the
# example and the overhead benchmark. Run from the repository root:
#   tests/python/run_gpu_python.sh OUTDIR [BUILD]      (BUILD default: build)
# PYTHON names the interpreter that has torch (default python3); KVQ_WHEELHOUSE, a folder of
# wheels (pytest and its dependencies) to install offline where the machine has no pytest.
# Writes OUTDIR/pytest.log, OUTDIR/decode_step.log, OUTDIR/overhead.json and OUTDIR/overhead.log.
set -uo pipefail
out=${1:?usage: run_gpu_python.sh OUTDIR [BUILD]}
build=${2:-build}
mkdir -p "$out"
out=$(cd "$out" && pwd)
wheel=$(ls "$build"/python-dist/kvq-*-py3-none-linux_x86_64.whl 2>/dev/null | head -1)
if [[ -z $wheel ]]; then
  echo "run_gpu_python: no wheel in $build/python-dist: build it with tests/python/run_pytest.sh" >&2
  exit 2
fi
venv=$(mktemp -d)/venv
"${PYTHON:-python3}" -m venv --system-site-packages "$venv" || exit 2
# Where PYTHON is itself a virtual environment (torch installed there), its packages are not the
# system's: make them visible to the new environment too.
"${PYTHON:-python3}" -c "import site; print('\n'.join(site.getsitepackages()))" \
  > "$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/base.pth"
"$venv/bin/pip" install -q --no-index --no-deps "$wheel" || exit 2
if ! "$venv/bin/python" -c "import pytest" 2>/dev/null && [[ -n ${KVQ_WHEELHOUSE:-} ]]; then
  "$venv/bin/pip" install -q --no-index --find-links "$KVQ_WHEELHOUSE" pytest || exit 2
fi
"$venv/bin/python" -c "import sys, torch, kvq; print('python', sys.version.split()[0], 'torch', torch.__version__, 'kvq', kvq.__version__, 'cuda', torch.cuda.is_available()); print(kvq.backends())" | tee "$out/env.txt"
# BUILD/bin/kvq finds BUILD/lib by its RUNPATH: no LD_LIBRARY_PATH, which would also hand the
# package the build's libkvq_core (and plugins) instead of its own.
export KVQ_REQUIRE_GPU=1 KVQ_BUILD_DIR=$PWD/$build
rc=0
(cd tests/python && timeout 400 "$venv/bin/python" -m pytest -p no:cacheprovider -q -rs . ) \
  > "$out/pytest.log" 2>&1 || rc=1
tail -5 "$out/pytest.log"
timeout 120 "$venv/bin/python" examples/python/decode_step.py > "$out/decode_step.log" 2>&1 || rc=1
cat "$out/decode_step.log"
timeout 300 "$venv/bin/python" python/benchmarks/write_overhead.py --json "$out/overhead.json" \
  > "$out/overhead.log" 2>&1 || rc=1
cat "$out/overhead.log"
exit $rc
