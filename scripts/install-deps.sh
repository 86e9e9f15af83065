#!/usr/bin/env bash
# Installs kvq's build and test dependencies from Debian 12 (bookworm) packages.
# CUDA is not installed here: it is optional, and detected by CMake when nvcc is on PATH or in
# /usr/local/cuda.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git
  libboost-dev            # Boost.DLL (header-only with BOOST_DLL_USE_STD_FS)
  libyaml-cpp-dev         # config
  libspdlog-dev libfmt-dev  # logging
  libgtest-dev libgmock-dev # tests
  libcli11-dev            # command line
  nlohmann-json3-dev      # safetensors headers, JSON output
  libdlpack-dev           # DLTensor interchange
  python3 python3-matplotlib  # `kvq bench --plot`
  python3-numpy           # examples/make_kv.py, the Python package's tests
  python3-venv python3-pip python3-pytest  # the Python package: its venv, wheel and tests
  clang-format
  clang                   # tests build the example plugin with another compiler
)

sudo_cmd=()
if [[ $(id -u) -ne 0 ]]; then sudo_cmd=(sudo); fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  echo "install-deps: all ${#packages[@]} packages already installed"
  exit 0
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
