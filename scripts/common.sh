# Shared by scripts/setup.sh and scripts/test.sh. Source it; it defines:
#   REPO, PY (the Python with torch), BUILD_DIR, and the functions below.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${SCANOPS_BUILD_DIR:-$REPO/build}"
log() { printf '\n==> %s\n' "$*"; }

# System packages: GoogleTest (Debian's libgtest-dev) and ccache. Installed only if missing.
install_system_packages() {
  local need=()
  [ -f /usr/include/gtest/gtest.h ] || need+=(libgtest-dev)
  command -v ccache >/dev/null || need+=(ccache)
  [ ${#need[@]} -eq 0 ] && return 0
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    log "apt-get install ${need[*]}"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
  else
    echo "warning: missing ${need[*]} and cannot apt-get install them" >&2
  fi
}

# The Python with torch: $SCANOPS_PYTHON if set (e.g. a machine with torch preinstalled and
# no network), else the project's own virtual environment .venv, created on first use from
# requirements.txt (torch==2.11.0 pinned; cmake and ninja from PyPI).
setup_python() {
  if [ -n "${SCANOPS_PYTHON:-}" ]; then
    PY="$SCANOPS_PYTHON"
  else
    if [ ! -x "$REPO/.venv/bin/python" ] || ! "$REPO/.venv/bin/python" -c "import torch" 2>/dev/null; then
      log "creating .venv (torch 2.11.0 + cmake + ninja + pytest from PyPI)"
      python3 -m venv "$REPO/.venv"
      "$REPO/.venv/bin/pip" install -q --upgrade pip
      "$REPO/.venv/bin/pip" install -q -r "$REPO/requirements.txt"
    fi
    PY="$REPO/.venv/bin/python"
  fi
  PYBIN="$(dirname "$PY")"
  export PATH="$PYBIN:$PATH"
  "$PY" -c "import torch; print('torch', torch.__version__, 'cuda available:', torch.cuda.is_available())"
}

# CUDA architectures: $SCANOPS_CUDA_ARCHS if set; else the GPUs present (nvidia-smi), else
# Hopper (9.0) alone to keep a GPU-less build short. A release build for every user
# architecture uses CMake's default list (see CMakeLists.txt).
cuda_archs() {
  if [ -n "${SCANOPS_CUDA_ARCHS:-}" ]; then echo "$SCANOPS_CUDA_ARCHS"; return; fi
  local caps=""
  if command -v nvidia-smi >/dev/null 2>&1; then
    caps="$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | sort -u | paste -sd';' || true)"
  fi
  echo "${caps:-9.0}"
}

# Configure and build (library, GoogleTest suite, examples).
build() {
  local with_cuda=ON
  if ! command -v nvcc >/dev/null && [ ! -x /usr/local/cuda/bin/nvcc ]; then with_cuda=OFF; fi
  with_cuda="${SCANOPS_WITH_CUDA:-$with_cuda}"
  local cmake_bin="cmake"
  [ -x "$PYBIN/cmake" ] && cmake_bin="$PYBIN/cmake"
  local gen=()
  if [ -x "$PYBIN/ninja" ] || command -v ninja >/dev/null; then gen=(-G Ninja); fi
  if [ ! -f "$BUILD_DIR/CMakeCache.txt" ]; then
    log "configuring (CUDA: $with_cuda, archs: $(cuda_archs))"
    "$cmake_bin" -S "$REPO" -B "$BUILD_DIR" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release \
      -DPython3_EXECUTABLE="$PY" -DSCANOPS_WITH_CUDA="$with_cuda" \
      -DSCANOPS_CUDA_ARCHS="$(cuda_archs)" ${SCANOPS_CMAKE_ARGS:-}
  fi
  log "building"
  "$cmake_bin" --build "$BUILD_DIR" --parallel "${SCANOPS_JOBS:-$(nproc)}"
  export SCANOPS_LIBRARY="$BUILD_DIR/libscanops.so"
}
