#!/usr/bin/env bash
# Runs the demo on an existing build: every op from Python (torch.ops.load_library) and
# from C++ (the public header), on CUDA when a GPU is present, else CPU.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
PY="${SCANOPS_PYTHON:-$REPO/.venv/bin/python}"
export SCANOPS_LIBRARY="${SCANOPS_LIBRARY:-$BUILD_DIR/libscanops.so}"
export PYTHONPATH="$REPO/python${PYTHONPATH:+:$PYTHONPATH}"
"$PY" "$REPO/examples/python_demo.py"
"$BUILD_DIR/examples/cpp_api/scanops_cpp_api_example"
