#!/usr/bin/env bash
# Builds the kvq wheel from a built tree (no second compile: python/CMakeLists.txt packs BUILD/lib)
# into BUILD/python-dist, installs it into the virtual environment BUILD/pyenv (made from
# Debian's /usr/bin/python3, with its numpy and pytest), and runs tests/python there.
#   tests/python/run_pytest.sh BUILD_DIR
# The ctest test python_package runs it; the first run fetches scikit-build-core from PyPI.
set -euo pipefail
build=$(cd "${1:?usage: run_pytest.sh BUILD_DIR}" && pwd)
root=$(cd "$(dirname "$0")/../.." && pwd)
python=${KVQ_PYTHON:-/usr/bin/python3}
venv=$build/pyenv
if [[ ! -x $venv/bin/python ]]; then
  "$python" -m venv --system-site-packages "$venv"
fi
if ! "$venv/bin/python" -c "import scikit_build_core" 2>/dev/null; then
  "$venv/bin/pip" install -q "scikit-build-core>=0.10"
fi
rm -rf "$build/python-dist"
"$venv/bin/pip" wheel -q --no-build-isolation --no-deps -w "$build/python-dist" "$root/python" \
  --config-settings=cmake.define.KVQ_PREBUILT_DIR="$build" \
  --config-settings=build-dir="$build/python-wheel"
"$venv/bin/pip" install -q --no-index --no-deps --force-reinstall "$build"/python-dist/kvq-*.whl
cd "$root/tests/python"
# -p no:cacheprovider: nothing written into the source tree.
KVQ_BUILD_DIR="$build" exec "$venv/bin/python" -m pytest -p no:cacheprovider -q -rs .
