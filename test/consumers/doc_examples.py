"""The docs show the tested example files verbatim. A fenced code block right after a marker

    <!-- example: examples/aoti/export_aoti.py -->

must equal that file (path relative to the repository root). test_consumers.py checks it;

    python test/consumers/doc_examples.py --write

rewrites the blocks from the files after an example changes.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Iterator, List, Tuple

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "docs" / name for name in ("python.md", "cpp.md", "torchscript.md", "export.md")]

_BLOCK = re.compile(
    r"<!-- example: (?P<path>\S+) -->\n(?P<fence>```+)(?P<lang>[^\n]*)\n(?P<body>.*?)(?P=fence)\n",
    re.S)


def blocks(doc: Path) -> Iterator[Tuple[re.Match, Path]]:
    for m in _BLOCK.finditer(doc.read_text()):
        yield m, REPO / m.group("path")


def mismatches() -> List[str]:
    """One line per doc block that differs from its file (or names a missing file)."""
    out = []
    for doc in DOCS:
        if not doc.exists():
            out.append(f"{doc.relative_to(REPO)}: missing")
            continue
        for m, path in blocks(doc):
            if not path.exists():
                out.append(f"{doc.relative_to(REPO)}: {m.group('path')} does not exist")
            elif m.group("body") != path.read_text():
                out.append(f"{doc.relative_to(REPO)}: block differs from {m.group('path')}")
    return out


def write() -> None:
    for doc in DOCS:
        text = doc.read_text()
        new = _BLOCK.sub(
            lambda m: (f"<!-- example: {m.group('path')} -->\n{m.group('fence')}"
                       f"{m.group('lang')}\n{(REPO / m.group('path')).read_text()}"
                       f"{m.group('fence')}\n"),
            text)
        if new != text:
            doc.write_text(new)
            print(f"updated {doc.relative_to(REPO)}")


if __name__ == "__main__":
    if "--write" in sys.argv:
        write()
    problems = mismatches()
    print("\n".join(problems) or "docs match the example files")
    sys.exit(1 if problems else 0)
