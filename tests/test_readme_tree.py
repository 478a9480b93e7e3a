"""The README's file tree stays true: every file it names exists, and every source file of a folder
whose files it lists is among them (STYLE.md: "The README's file tree has one comment per file")."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COMMENT_COLUMN = 32  # names sit left of this column, their comment right of it


def tree_entries() -> dict[Path, bool]:
    """Path -> whether it is a folder, for every name in the README's ``## Files`` block."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = text.split("## Files", 1)[1].split("```", 2)[1]
    entries: dict[Path, bool] = {}
    stack: list[Path] = []
    for line in block.splitlines():
        if not line.strip():
            continue
        indent = (len(line) - len(line.lstrip(" "))) // 2
        names = line[:COMMENT_COLUMN].strip()
        if not names:  # a comment's continuation
            continue
        if all(w.endswith(".py") for w in line.split()):  # a line of names only (planner/bench's modules)
            names = line.strip()
        del stack[indent:]
        parent = stack[-1] if stack else Path()
        for name in re.split(r"[,\s]+", names):
            if not name:
                continue
            folder = name.endswith("/")
            path = parent / name.rstrip("/")
            entries[path] = folder
            if folder:
                stack.append(path)
    return entries


def test_every_name_in_the_tree_exists():
    missing = [str(p) for p, folder in tree_entries().items() if not (ROOT / p).exists()]
    assert not missing, f"the README's file tree names files that do not exist: {missing}"


def test_every_source_file_of_a_listed_folder_is_in_the_tree():
    entries = tree_entries()
    listed_folders = {p.parent for p, folder in entries.items() if not folder}  # folders whose files are named
    unlisted = sorted(
        str(f.relative_to(ROOT))
        for folder in listed_folders
        for f in (ROOT / folder).glob("*.py")
        if f.name != "__init__.py" and f.relative_to(ROOT) not in entries
    )
    assert not unlisted, f"source files the README's file tree does not list: {unlisted}"
