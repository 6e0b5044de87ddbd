"""Compares the sm_90 SASS of two builds' CUDA objects function by function.

Usage: python scripts/sass_compare.py OLD.cu.o NEW.cu.o [N]
Prints how many kernels present in both are the same instruction for instruction (register and
predicate numbers and immediates normalised) and which differ (by kernel family); with N, the
first N differing lines of the first differing kernel. Kernels whose mangled name changed (other
template arguments) are not compared. cuobjdump: $CUOBJDUMP, else the one triton ships in the
project's .venv, else cuobjdump on PATH.
"""
import difflib
import glob
import os
import re
import shutil
import subprocess
import sys


def cuobjdump():
    if os.environ.get("CUOBJDUMP"):
        return os.environ["CUOBJDUMP"]
    here = os.path.dirname(os.path.abspath(__file__))
    found = glob.glob(os.path.join(here, "..", ".venv", "lib", "python3*", "site-packages", "triton",
                                   "backends", "nvidia", "bin", "cuobjdump"))
    return found[0] if found else shutil.which("cuobjdump")


def functions(path):
    text = subprocess.run([cuobjdump(), "-sass", path], capture_output=True, text=True, check=True).stdout
    out, cur = {}, None
    for line in text.split("\n"):
        m = re.search(r"Function : (\S+)", line)
        if m:
            cur = m.group(1)
            out[cur] = []
            continue
        m = re.match(r"\s+/\*[0-9a-f]{4,5}\*/\s+([^;]*);", line)
        if m and cur:
            ins = re.sub(r"\bU?R\d+\b", "R", m.group(1))
            ins = re.sub(r"\b!?U?P\d\b", "P", ins)
            out[cur].append(re.sub(r"0x[0-9a-f]+", "X", ins))
    return out


def main():
    a, b = functions(sys.argv[1]), functions(sys.argv[2])
    same, differ, kinds, first = 0, 0, {}, None
    for k in a:
        if k not in b:
            continue
        if a[k] == b[k]:
            same += 1
            continue
        differ += 1
        first = first or k
        m = re.search(r"cuda\d+(?:\d*[a-z]+\d+)*([A-Za-z_]+?)I", k)
        name = m.group(1) if m else k[:40]
        kinds[name] = kinds.get(name, 0) + 1
    print(f"{os.path.basename(sys.argv[1])}: same {same}, differ {differ}: {kinds}")
    if len(sys.argv) > 3 and first:
        d = [l for l in difflib.unified_diff(a[first], b[first], lineterm="", n=0)
             if l[:1] in "+-" and l[:3] not in ("+++", "---")]
        print(first[:160], len(a[first]), len(b[first]))
        print("\n".join(d[:int(sys.argv[3])]))


if __name__ == "__main__":
    main()
