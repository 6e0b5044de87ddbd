# Shared by scripts/setup.sh and scripts/test.sh. Source it; it defines:
#   REPO, TORCH_CHOICE, PY (the Python with torch), BUILD_DIR, CONSUMERS_DIR, and the
#   functions below.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
log() { printf '\n==> %s\n' "$*"; }

# Which torch (SCANOPS_TORCH; ignored when SCANOPS_PYTHON names a Python):
#   pinned (default, or its version 2.11.0): requirements.txt  -> .venv, build/
#   newest (or its version 2.15.0):          requirements-newest.txt -> build-newest/venv,
#                                            build-newest/build
#   both (scripts/test.sh only; what CI runs): pinned, then newest
torch_pin() { sed -n 's/^torch==\([^ ]*\).*/\1/p' "$REPO/$1" | head -1; }
case "${SCANOPS_TORCH:-pinned}" in
  pinned|"$(torch_pin requirements.txt)") TORCH_CHOICE=pinned ;;
  newest|"$(torch_pin requirements-newest.txt)") TORCH_CHOICE=newest ;;
  both) TORCH_CHOICE=both ;;
  *) echo "SCANOPS_TORCH=$SCANOPS_TORCH: expected pinned ($(torch_pin requirements.txt))," \
       "newest ($(torch_pin requirements-newest.txt)) or both" >&2; exit 2 ;;
esac
if [ "$TORCH_CHOICE" = newest ]; then
  REQUIREMENTS="$REPO/requirements-newest.txt"
  VENV="$REPO/build-newest/venv"
  BUILD_DIR="${SCANOPS_BUILD_DIR:-$REPO/build-newest/build}"
  CONSUMERS_DIR="${SCANOPS_CONSUMERS_DIR:-$REPO/build-newest/consumers}"
else
  REQUIREMENTS="$REPO/requirements.txt"
  VENV="$REPO/.venv"
  BUILD_DIR="${SCANOPS_BUILD_DIR:-$REPO/build}"
  CONSUMERS_DIR="${SCANOPS_CONSUMERS_DIR:-$REPO/build-consumers}"
fi
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
# no network), else the virtual environment of the chosen torch ($VENV), created on first use
# from $REQUIREMENTS and brought up to date when a requirements file changes.
setup_python() {
  if [ -n "${SCANOPS_PYTHON:-}" ]; then
    PY="$SCANOPS_PYTHON"
  else
    local stamp want
    want="$(cat "$REQUIREMENTS" "$REPO/requirements-tools.txt" | sha256sum | cut -c1-16)"
    stamp="$VENV/.scanops-requirements"
    if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c "import torch" 2>/dev/null; then
      log "creating $VENV ($(basename "$REQUIREMENTS"): torch $(torch_pin "$(basename "$REQUIREMENTS")"), cmake, ninja, pytest, ... from PyPI)"
      mkdir -p "$(dirname "$VENV")"
      python3 -m venv "$VENV"
      "$VENV/bin/pip" install -q --upgrade pip
      "$VENV/bin/pip" install -q -r "$REQUIREMENTS"
      echo "$want" >"$stamp"
    elif [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
      log "updating $VENV from $(basename "$REQUIREMENTS")"
      "$VENV/bin/pip" install -q -r "$REQUIREMENTS"
      echo "$want" >"$stamp"
    fi
    PY="$VENV/bin/python"
  fi
  PYBIN="$(dirname "$PY")"
  export PATH="$PYBIN:$PATH"
  "$PY" -c "import torch; print('torch', torch.__version__, 'cuda available:', torch.cuda.is_available())"
}

# CUDA architectures: $SCANOPS_CUDA_ARCHS if set, else $TORCH_CUDA_ARCH_LIST; else the GPUs present (nvidia-smi), else
# Hopper (9.0) alone to keep a GPU-less build short. A release build for every user
# architecture uses CMake's default list (see CMakeLists.txt).
cuda_archs() {
  if [ -n "${SCANOPS_CUDA_ARCHS:-}" ]; then echo "$SCANOPS_CUDA_ARCHS"; return; fi
  if [ -n "${TORCH_CUDA_ARCH_LIST:-}" ]; then echo "$TORCH_CUDA_ARCH_LIST"; return; fi
  local caps=""
  if command -v nvidia-smi >/dev/null 2>&1; then
    caps="$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | sort -u | paste -sd';' || true)"
  fi
  echo "${caps:-9.0}"
}

# Whether to build the CUDA back end (the SCANOPS_WITH_CUDA value for CMake):
#   SCANOPS_WITH_CUDA=ON|OFF|AUTO   as given (AUTO: when torch is a CUDA build and nvcc is found,
#                                   with or without a GPU);
#   SCANOPS_WITH_CUDA=pinned|newest ON for that torch choice only, OFF for the other (CI: the
#                                   kernels compile once, against the GPU machines' torch);
#   unset                           ON when a GPU is present (nvidia-smi lists one), else OFF:
#                                   a machine without a GPU gets the CPU back end in minutes
#                                   instead of ~15 more of CUDA compiling it could not run.
cuda_choice() {
  case "${SCANOPS_WITH_CUDA:-}" in
    pinned|newest) [ "$SCANOPS_WITH_CUDA" = "$TORCH_CHOICE" ] && echo ON || echo OFF ;;
    "") if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
          echo ON; else echo OFF; fi ;;
    *) echo "$SCANOPS_WITH_CUDA" ;;
  esac
}

# A compiler cache shared by every build of this checkout: ccache (CMakeLists.txt sets it as
# the compiler launcher when installed) with paths rewritten relative to the build directory,
# so that builds at the same depth below $REPO share objects: build/ and build-pip/ (the pip
# install test), build-newest/build and build-newest/build-pip.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$REPO}" CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-1}"

# Times the phases of a script: phase_begin NAME ... phase_end appends "NAME seconds" to
# $PHASES_FILE (when set); phase_summary prints them. (Not a wrapper function: a command run
# as `f || ...` would run f with `set -e` ignored inside it.)
phase_begin() { PHASE_NAME="$1"; PHASE_T0=$(date +%s); }
phase_end() {
  [ -z "${PHASES_FILE:-}" ] ||
    printf '%-52s %5d s\n' "$PHASE_NAME" $(( $(date +%s) - PHASE_T0 )) >>"$PHASES_FILE"
}
phase_summary() {
  [ -n "${PHASES_FILE:-}" ] && [ -f "$PHASES_FILE" ] || return 0
  log "time per phase ($1)"
  cat "$PHASES_FILE"
}

# Configure and build. The CUDA back end as cuda_choice says. A build directory configured for
# another Python (another torch) is configured afresh; one configured with another CUDA choice
# is reconfigured. Arguments: the targets to build (default: all: the library, the GoogleTest
# suite, the examples).
build() {
  local cmake_bin="cmake"
  [ -x "$PYBIN/cmake" ] && cmake_bin="$PYBIN/cmake"
  local gen=() fresh=() cuda
  cuda="$(cuda_choice)"
  if [ -x "$PYBIN/ninja" ] || command -v ninja >/dev/null; then gen=(-G Ninja); fi
  local cache="$BUILD_DIR/CMakeCache.txt"
  if [ -f "$cache" ] &&
     [ "$(sed -n 's/^Python3_EXECUTABLE:[A-Z]*=//p' "$cache")" != "$PY" ]; then
    log "$BUILD_DIR was configured for another Python: configuring afresh for $PY"
    fresh=(--fresh)
  fi
  if [ ! -f "$cache" ] || [ ${#fresh[@]} -gt 0 ] ||
     [ "$(sed -n 's/^SCANOPS_WITH_CUDA:[A-Z]*=//p' "$cache")" != "$cuda" ]; then
    log "configuring $BUILD_DIR (CUDA back end: $cuda, archs: $(cuda_archs))"
    "$cmake_bin" "${fresh[@]}" -S "$REPO" -B "$BUILD_DIR" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release \
      -DPython3_EXECUTABLE="$PY" -DSCANOPS_WITH_CUDA="$cuda" \
      -DSCANOPS_CUDA_ARCHS="$(cuda_archs)" ${SCANOPS_CMAKE_ARGS:-}
  fi
  log "building $BUILD_DIR${1:+ (targets: $*)}"
  local targets=()
  [ $# -gt 0 ] && targets=(--target "$@")
  "$cmake_bin" --build "$BUILD_DIR" --parallel "${SCANOPS_JOBS:-$(nproc)}" "${targets[@]}"
  export SCANOPS_LIBRARY="$BUILD_DIR/libscanops.so"
}
