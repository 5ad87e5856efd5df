#!/usr/bin/env bash
# Installs what kbmla needs on a fresh Debian 12 machine that already has the CUDA
# toolkit (nvcc 13.0): the Debian packages, the pinned CuTe/CUTLASS headers from PyPI, and
# nanobind, pytest and numpy for the Python module.
set -euo pipefail

# Pinned: the CuTe/CUTLASS headers inside this wheel are the ones the kernels are written
# against (cutlass_library/source/include); CMake asks python3 where they are.
CUTLASS_PYPI_VERSION=4.2.0.0

debs=(cmake ninja-build g++ python3 python3-pip python3-dev googletest libgtest-dev libcli11-dev nlohmann-json3-dev libfmt-dev)
missing=()
for d in "${debs[@]}"; do
  dpkg-query -W -f='${Status}' "$d" 2>/dev/null | grep -q 'install ok installed' || missing+=("$d")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# PyPI packages, pinned: the CuTe headers, and for the Python module (python/) nanobind,
# with pytest and numpy for its CPU tests.
pypi=("nvidia-cutlass==${CUTLASS_PYPI_VERSION}" "nanobind==2.4.0" "pytest==9.2.0" "numpy==2.4.6")
need=()
for spec in "${pypi[@]}"; do
  name=${spec%%==*}; want=${spec##*==}
  have=$(python3 -c "import importlib.metadata as m; print(m.version('$name'))" 2>/dev/null || true)
  [ "$have" = "$want" ] || need+=("$spec")
done
if [ ${#need[@]} -gt 0 ]; then
  python3 -m pip install -q --disable-pip-version-check "${need[@]}" 2>/dev/null ||
    python3 -m pip install -q --disable-pip-version-check --break-system-packages "${need[@]}"
fi

command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ] || {
  echo "install-deps: nvcc not found; install the CUDA toolkit 13.0 (it is not on PyPI or Debian 12)" >&2
  exit 1
}
