"""The house rules CI checks besides ruff and the layers contract (pyproject's [tool.importlinter]): no
import cycle anywhere in attnviz (lazy imports included), no private name imported across modules, and each
fact in one home (bytes are written in words by style.format_bytes alone)."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "attnviz"


def _cycles(graph) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm, iteratively)."""
    edges = {m: sorted(graph.find_modules_directly_imported_by(m)) for m in graph.modules}
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(root):
        work = [(root, iter(edges[root]))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root), on.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        m = stack.pop()
                        on.discard(m)
                        component.append(m)
                        if m == node:
                            break
                    if len(component) > 1:
                        out.append(sorted(component))
            elif child not in index:
                index[child] = low[child] = counter[0]
                counter[0] += 1
                stack.append(child), on.add(child)
                work.append((child, iter(edges[child])))
            elif child in on:
                low[node] = min(low[node], index[child])
    for module in sorted(edges):
        if module not in index:
            visit(module)
    return out


def test_no_import_cycle_in_attnviz():
    grimp = pytest.importorskip("grimp")
    assert _cycles(grimp.build_graph("attnviz")) == []


def test_no_private_name_is_imported_across_modules():
    found = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module != "__future__":
                found += [f"{path.relative_to(PACKAGE)}: {a.name}" for a in node.names
                          if a.name.startswith("_") and not a.name.startswith("__")]
    assert found == []


def test_bytes_are_written_in_words_by_style_format_bytes_alone():
    by_hand = re.compile(r"/ ?2 ?\*\* ?(10|20|30)\b|>> ?(10|20|30)\}")  # n / 2**20 or {n >> 20} in a message
    found = [f"{path.relative_to(PACKAGE)}:{i}" for path in PACKAGE.rglob("*.py") if path.name != "style.py"
             for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if by_hand.search(line)]
    assert found == []


def test_run_config_imports_without_the_engine():
    """RunConfig's module is data: importing it, its fields and their metadata (what the CLI's parser and the
    parameter panel are generated from) loads neither torch nor the kernel. Validating a configuration reads
    the variant registry, which does."""
    code = ("import sys, dataclasses\n"
            "from attnviz.core import RunConfig, ConfigError, MASK_KINDS, POSITION_KINDS\n"
            "meta = {f.name: f.metadata for f in dataclasses.fields(RunConfig)}\n"
            "assert meta['pool']['choices'] and 'window' in MASK_KINDS and 'rope' in POSITION_KINDS\n"
            "print(','.join(sorted(m for m in sys.modules if m == 'torch' or 'core.kernel.k' in m)))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          cwd=PACKAGE.parent)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "attnviz.core.kernel.kinds"  # the names of the kernel's choices, nothing more
