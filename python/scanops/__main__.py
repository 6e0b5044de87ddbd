"""python -m scanops: where the installed scanops is, for build systems.

  python -m scanops                      version, library, what it was built against
  python -m scanops --cmake-prefix-path  CMAKE_PREFIX_PATH for find_package(scanops): the
                                         scanops prefix, then torch's (find_package(scanops)
                                         finds Torch through it)
  python -m scanops --cmake-dir          the directory holding scanopsConfig.cmake (scanops_DIR)
  python -m scanops --include-dir        the directory holding scanops/scanops.h
  python -m scanops --library            the path of libscanops.so
"""
from __future__ import annotations

import argparse
import os
import sys

import torch
import torch.utils

import scanops


def _prefix() -> str:
    prefix = scanops.cmake_prefix_path()
    if prefix is None:
        sys.exit("scanops: this scanops has no CMake package (a source-tree package; install "
                 "it with pip install . or cmake --install)")
    return prefix


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scanops", description=__doc__.split("\n")[0])
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--cmake-prefix-path", action="store_true",
                       help="CMAKE_PREFIX_PATH for find_package(scanops): scanops';'torch")
    group.add_argument("--cmake-dir", action="store_true", help="scanops_DIR")
    group.add_argument("--include-dir", action="store_true", help="the public headers' root")
    group.add_argument("--library", action="store_true", help="libscanops.so")
    args = parser.parse_args(argv)
    if args.cmake_prefix_path:
        print(f"{_prefix()};{torch.utils.cmake_prefix_path}")
    elif args.cmake_dir:
        print(os.path.join(_prefix(), "lib", "cmake", "scanops"))
    elif args.include_dir:
        print(os.path.join(_prefix(), "include"))
    elif args.library:
        print(scanops.library_path())
    else:
        print(f"scanops {scanops.__version__}")
        print(f"  library:      {scanops.library_path()}")
        print(f"  cmake prefix: {scanops.cmake_prefix_path()}")
        for key, value in scanops.build_info().items():
            print(f"  built with {key}: {value}")
        print(f"  torch now:    {torch.__version__} (CUDA available: {torch.cuda.is_available()})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
