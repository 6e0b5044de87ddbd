#!/usr/bin/env bash
# Consumes scanops the ways a user does, from an *installed* copy of an existing build:
#
#   install      cmake --install <build> --prefix <work>/prefix
#   outside      a separate CMake project (test/consumers/outside_project): find_package(scanops),
#                link scanops::scanops, build, run
#   examples     the TorchScript and AOTInductor C++ loaders (examples/), built on their own
#                against the installed package (needs: install)
#   torchscript  examples/torchscript/export_module.py (Python), then the C++ loader runs the
#                scripted module with Python out of the picture (needs: examples)
#   aoti         examples/aoti/export_aoti.py: torch.export + AOTInductor -> .pt2, then the C++
#                loader runs it (needs: examples; a C++ compiler at export time)
#   python       the Python package from the install tree (lib/python/scanops) runs
#                examples/python_demo.py (needs: install)
#   pip          pip install --no-build-isolation --target <work>/pip-site . (the wheel
#                layout: scanops/ with lib/libscanops.so, include/, lib/cmake/; beside links
#                to the Python's torch/ and nvidia/, as in a site-packages); checks the
#                library's RUNPATH is relative ($ORIGIN/../../torch/lib), imports it from
#                another directory with no SCANOPS_* variable, then builds and runs the
#                outside project against it (CMAKE_PREFIX_PATH from
#                python -m scanops --cmake-prefix-path). Needs scikit-build-core. Not part of
#                the default list (it builds the library once more): name it.
#
# Usage: test/consumers/run_consumers.sh [STEP...]   (no STEP: all, in the order above)
# Environment:
#   SCANOPS_BUILD_DIR      the build to install (default <repo>/build)
#   SCANOPS_CONSUMERS_DIR  work directory (default <repo>/build-consumers); kept between runs
#                          so rebuilds are incremental
#   SCANOPS_PYTHON         the Python with torch (default <repo>/.venv/bin/python, else python3)
#   SCANOPS_AOTI_DEVICES   devices to compile AOTI packages for (default: cpu, plus cuda when
#                          torch sees a GPU)
#   SCANOPS_CUDA_ARCHS     the pip step's CUDA architectures (default: those of SCANOPS_BUILD_DIR)
#   SCANOPS_WITH_CUDA      the pip step's CUDA back end, ON/OFF/AUTO (default: SCANOPS_BUILD_DIR's)
#   SCANOPS_PIP_BUILD_DIR  the pip step's build directory (default: SCANOPS_BUILD_DIR-pip)
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD_DIR="${SCANOPS_BUILD_DIR:-$REPO/build}"
WORK="${SCANOPS_CONSUMERS_DIR:-$REPO/build-consumers}"
PREFIX="$WORK/prefix"
if [ -n "${SCANOPS_PYTHON:-}" ]; then PY="$SCANOPS_PYTHON"
elif [ -x "$REPO/.venv/bin/python" ]; then PY="$REPO/.venv/bin/python"
else PY="$(command -v python3)"; fi
PYBIN="$(dirname "$PY")"
CMAKE="cmake"; [ -x "$PYBIN/cmake" ] && CMAKE="$PYBIN/cmake"
GEN=()
if [ -x "$PYBIN/ninja" ]; then GEN=(-G Ninja -DCMAKE_MAKE_PROGRAM="$PYBIN/ninja")
elif command -v ninja >/dev/null; then GEN=(-G Ninja); fi
# Python must not find the source tree's package or library in the install-tree steps.
unset SCANOPS_LIBRARY PYTHONPATH

log() { printf '\n==> %s\n' "$*"; }
fail() { printf 'run_consumers.sh: %s\n' "$*" >&2; exit 1; }
timed() {  # timed LABEL CMD...: runs CMD, prints its wall time
  local label="$1" t0 t1; shift
  t0=$(date +%s%N); "$@"; t1=$(date +%s%N)
  local ds=$(( (t1 - t0) / 100000000 ))
  printf -- '--- %s: %d.%d s\n' "$label" $((ds / 10)) $((ds % 10))
}
torch_prefix() { "$PY" -c 'import torch.utils; print(torch.utils.cmake_prefix_path)'; }
configure() {  # configure SRC BUILD: against the installed scanops + the Python's torch
  "$CMAKE" -S "$1" -B "$2" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_PREFIX_PATH="$PREFIX;$(torch_prefix)" >"$2.configure.log" 2>&1 ||
    { cat "$2.configure.log"; fail "configuring $1 failed"; }
}
check_libs() {  # check_libs FILE: it loads no libpython, and finds every library it needs
  local deps; deps="$(ldd "$1")"
  if grep -i 'libpython' <<<"$deps"; then fail "$1 loads libpython"; fi
  echo "ldd $(basename "$1"): no libpython"
  if grep 'not found' <<<"$deps"; then
    if [[ "$1" == *.so ]]; then
      # The installed library cannot find its dependencies on its own (its RUNPATH lacks
      # torch's lib/); it still works where they are loaded first (Python after import
      # torch, or a program that links them), but see the programs' checks.
      echo "warning: $1 does not find the libraries above by itself"
      return 1
    fi
    echo "RUNPATH of the installed library: $(readelf -d "$PREFIX/lib/libscanops.so" |
      sed -n 's/.*runpath: \[\(.*\)\]/\1/p')" >&2
    fail "$1: the dynamic loader cannot find the libraries above (see ldd $1). The installed
libscanops.so looks its own dependencies up through its RUNPATH alone: the install RPATH must
hold torch's lib/ (and the CUDA runtime's) directory, not only \$ORIGIN (INSTALL_RPATH in
CMakeLists.txt)"
  fi
}
# Runs a C++ program with an empty environment (nothing from Python: no PYTHONPATH, no
# PYTHONHOME, no venv), keeping only what the GPU driver may need to be found.
clean_env() {
  env -i PATH=/usr/bin:/bin ${LD_LIBRARY_PATH:+LD_LIBRARY_PATH="$LD_LIBRARY_PATH"} \
    ${CUDA_VISIBLE_DEVICES:+CUDA_VISIBLE_DEVICES="$CUDA_VISIBLE_DEVICES"} "$@"
}
need_install() { [ -f "$PREFIX/lib/cmake/scanops/scanopsConfig.cmake" ] || fail "run the install step first"; }
need_examples() {
  [ -x "$WORK/examples/torchscript/scanops_run_scripted" ] || fail "run the examples step first"
}

step_install() {
  log "install $BUILD_DIR -> $PREFIX"
  [ -e "$BUILD_DIR/libscanops.so" ] || fail "no $BUILD_DIR/libscanops.so: build scanops first"
  rm -rf "$PREFIX"
  timed install "$CMAKE" --install "$BUILD_DIR" --prefix "$PREFIX" >/dev/null
  for f in lib/libscanops.so include/scanops/scanops.h lib/cmake/scanops/scanopsConfig.cmake \
           lib/python/scanops/__init__.py; do
    [ -e "$PREFIX/$f" ] || fail "install is missing $f"
  done
  check_libs "$PREFIX/lib/libscanops.so" || true  # a warning: see check_libs
}

step_outside() {
  need_install
  log "outside project: find_package(scanops) + scanops::scanops"
  mkdir -p "$WORK"
  timed configure configure "$REPO/test/consumers/outside_project" "$WORK/outside"
  timed build "$CMAKE" --build "$WORK/outside"
  check_libs "$WORK/outside/scanops_hello"
  timed run clean_env "$WORK/outside/scanops_hello"
}

step_examples() {
  need_install
  log "examples/ (TorchScript and AOTInductor loaders) against the installed package"
  mkdir -p "$WORK"
  timed configure configure "$REPO/examples" "$WORK/examples"
  timed build "$CMAKE" --build "$WORK/examples" --target scanops_run_scripted scanops_run_aoti
}

step_torchscript() {
  need_install; need_examples
  log "TorchScript: script + save in Python, load + run in C++"
  local out="$WORK/torchscript"
  mkdir -p "$out"
  timed export env PYTHONPATH="$PREFIX/lib/python" \
    "$PY" "$REPO/examples/torchscript/export_module.py" "$out"
  check_libs "$WORK/examples/torchscript/scanops_run_scripted"
  timed run clean_env "$WORK/examples/torchscript/scanops_run_scripted" \
    "$out/scan_model.pt" "$out/scan_model_io.pt"
}

step_aoti() {
  need_install; need_examples
  command -v "${CXX:-g++}" >/dev/null || command -v c++ >/dev/null ||
    fail "AOTInductor needs a C++ compiler at export time (none found)"
  local devices="${SCANOPS_AOTI_DEVICES:-}"
  if [ -z "$devices" ]; then
    devices=cpu
    if "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)'; then
      devices="cpu cuda"
    fi
  fi
  check_libs "$WORK/examples/aoti/scanops_run_aoti"
  for device in $devices; do
    log "AOTInductor ($device): torch.export + aoti_compile_and_package in Python, run in C++"
    local out="$WORK/aoti-$device"
    mkdir -p "$out"
    timed "export+compile ($device)" env PYTHONPATH="$PREFIX/lib/python" \
      "$PY" "$REPO/examples/aoti/export_aoti.py" "$out" --device "$device"
    timed "run ($device)" clean_env "$WORK/examples/aoti/scanops_run_aoti" \
      "$out/scan_model.pt2" "$out/scan_model_io.pt"
  done
}

step_python() {
  need_install
  log "Python package from the install tree"
  timed demo env PYTHONPATH="$PREFIX/lib/python" "$PY" "$REPO/examples/python_demo.py"
  env PYTHONPATH="$PREFIX/lib/python" PREFIX="$PREFIX" "$PY" - <<'EOF'
import os, scanops
lib = os.path.realpath(scanops.library_path())
assert lib.startswith(os.path.realpath(os.environ["PREFIX"])), f"loaded {lib}, not the install"
assert os.path.realpath(scanops.__file__).startswith(os.path.realpath(os.environ["PREFIX"]))
print(f"scanops {scanops.__version__}: package and library from the install tree ({lib})")
EOF
}

step_pip() {
  log "pip install --no-build-isolation . (wheel layout), import, find_package(scanops) from it"
  "$PY" -c 'import scikit_build_core' 2>/dev/null ||
    fail "the pip step needs scikit-build-core in $PY (requirements-tools.txt)"
  local site="$WORK/pip-site" tsite
  rm -rf "$site"
  mkdir -p "$site"
  tsite="$("$PY" -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))')"
  ln -s "$tsite/torch" "$site/torch"
  if [ -d "$tsite/nvidia" ]; then ln -s "$tsite/nvidia" "$site/nvidia"; fi
  # The main build's back ends, CUDA architectures (a GPU-less CI builds one, not the release
  # list) and compilers (scikit-build-core would take g++ where CMake took c++), and a build
  # directory at the same depth below the repository as the main build's: with
  # scripts/common.sh's CCACHE_BASEDIR every object is then a compiler-cache hit of the main
  # build's (the same command line), and the pip install links rather than compiles.
  local archs="${SCANOPS_CUDA_ARCHS:-}" cuda="${SCANOPS_WITH_CUDA:-}" cxx="" cudahost=""
  local cache="$BUILD_DIR/CMakeCache.txt"
  if [ -f "$cache" ]; then
    [ -n "$archs" ] || archs="$(sed -n 's/^SCANOPS_CUDA_ARCHS:[A-Z]*=//p' "$cache")"
    case "$cuda" in ON|OFF|AUTO) ;; *) cuda="$(sed -n 's/^SCANOPS_WITH_CUDA:[A-Z]*=//p' "$cache")" ;; esac
    cxx="$(sed -n 's/^CMAKE_CXX_COMPILER:[A-Z]*=//p' "$cache")"
    cudahost="$(sed -n 's/^CMAKE_CUDA_HOST_COMPILER:[A-Z]*=//p' "$cache")"
  fi
  case "$cuda" in ON|OFF|AUTO) ;; *) cuda="" ;; esac
  local pip_build="${SCANOPS_PIP_BUILD_DIR:-$BUILD_DIR-pip}"
  timed pip-install env ${archs:+SCANOPS_CUDA_ARCHS="$archs"} ${cuda:+SCANOPS_WITH_CUDA="$cuda"} \
    ${cxx:+CXX="$cxx"} ${cudahost:+CUDAHOSTCXX="$cudahost"} \
    "$PY" -m pip install -q --no-build-isolation --no-deps --target "$site" \
    -C build-dir="$pip_build" "$REPO"
  local lib="$site/scanops/lib/libscanops.so"
  for f in scanops/__init__.py scanops/__main__.py scanops/_build_info.py scanops/lib/libscanops.so \
           scanops/include/scanops/scanops.h scanops/lib/cmake/scanops/scanopsConfig.cmake; do
    [ -e "$site/$f" ] || fail "the pip install is missing $f"
  done
  local runpath
  runpath="$(readelf -d "$lib" | sed -n 's/.*R[UN]*PATH.*\[\(.*\)\]/\1/p')"
  echo "RUNPATH of the pip-installed library: $runpath"
  if tr ':' '\n' <<<"$runpath" | grep -q '^/'; then
    fail "the pip-installed library's RUNPATH has absolute paths (the build machine's): $runpath"
  fi
  grep -qF '$ORIGIN/../../torch/lib' <<<"$runpath" || fail "RUNPATH lacks \$ORIGIN/../../torch/lib"
  check_libs "$lib" || fail "the pip-installed library does not find its libraries"
  mkdir -p "$WORK/elsewhere"
  (cd "$WORK/elsewhere" && PYTHONPATH="$site" SITE="$site" "$PY" - <<'EOF'
import os, torch, scanops
lib = os.path.realpath(scanops.library_path())
site = os.path.realpath(os.environ["SITE"])
assert lib.startswith(site + "/scanops/lib/"), f"loaded {lib}, not the pip install"
x = torch.arange(6.0).reshape(2, 3)
assert torch.equal(torch.ops.scanops.cumsum(x, 1), x.cumsum(1))
assert torch.equal(scanops.cumsum(x, 1, exclusive=True), x.cumsum(1) - x)
info = scanops.build_info()
assert info["torch_version"].split(".")[:2] == torch.__version__.split(".")[:2], info
print(f"pip-installed scanops {scanops.__version__} from {lib}: ops OK; built with {info}")
EOF
  ) || fail "importing the pip-installed package failed"
  local prefix
  prefix="$(cd "$WORK/elsewhere" && PYTHONPATH="$site" "$PY" -m scanops --cmake-prefix-path)"
  echo "python -m scanops --cmake-prefix-path: $prefix"
  [[ "$prefix" == "$site/scanops;"* ]] || fail "unexpected --cmake-prefix-path: $prefix"
  rm -rf "$WORK/outside-pip"
  "$CMAKE" -S "$REPO/test/consumers/outside_project" -B "$WORK/outside-pip" "${GEN[@]}" \
    -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix" >"$WORK/outside-pip.configure.log" 2>&1 ||
    { cat "$WORK/outside-pip.configure.log"; fail "configuring the outside project against the pip install failed"; }
  timed build "$CMAKE" --build "$WORK/outside-pip"
  check_libs "$WORK/outside-pip/scanops_hello"
  timed run clean_env "$WORK/outside-pip/scanops_hello"
}

steps=("$@")
[ ${#steps[@]} -eq 0 ] && steps=(install outside examples torchscript aoti python)
for s in "${steps[@]}"; do
  case "$s" in
    install|outside|examples|torchscript|aoti|python|pip) "step_$s" ;;
    *) fail "unknown step '$s' (install outside examples torchscript aoti python pip)" ;;
  esac
done
log "consumers OK: ${steps[*]}"
