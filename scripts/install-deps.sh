#!/usr/bin/env bash
# Installs what kbmla needs on a fresh Debian 12 machine that already has the CUDA
# toolkit (nvcc 13.0): the Debian packages and the pinned CuTe/CUTLASS headers from PyPI.
set -euo pipefail

# Pinned: the CuTe/CUTLASS headers inside this wheel are the ones the kernels are written
# against (cutlass_library/source/include); CMake asks python3 where they are.
CUTLASS_PYPI_VERSION=4.2.0.0

debs=(cmake ninja-build g++ python3 python3-pip googletest libgtest-dev libcli11-dev nlohmann-json3-dev libfmt-dev)
missing=()
for d in "${debs[@]}"; do
  dpkg-query -W -f='${Status}' "$d" 2>/dev/null | grep -q 'install ok installed' || missing+=("$d")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

have=$(python3 -c 'import importlib.metadata as m; print(m.version("nvidia-cutlass"))' 2>/dev/null || true)
if [ "$have" != "$CUTLASS_PYPI_VERSION" ]; then
  python3 -m pip install -q --disable-pip-version-check "nvidia-cutlass==${CUTLASS_PYPI_VERSION}" 2>/dev/null ||
    python3 -m pip install -q --disable-pip-version-check --break-system-packages "nvidia-cutlass==${CUTLASS_PYPI_VERSION}"
fi

command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ] || {
  echo "install-deps: nvcc not found; install the CUDA toolkit 13.0 (it is not on PyPI or Debian 12)" >&2
  exit 1
}
