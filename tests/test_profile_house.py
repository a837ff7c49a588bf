"""The profiler's house: one pipeline (record -> trace -> measure -> judge -> assemble -> report -> show), with
torch only where steps are recorded, and no import circle anywhere in nanolm. The layers themselves are an
import-linter contract (pyproject.toml); these tests hold what a contract cannot say."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import grimp
import pytest

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture(scope="module")
def graph():
    return grimp.build_graph("nanolm", include_external_packages=True)


def circles(graph) -> list[list[str]]:
    """Every set of nanolm modules that import each other in a circle (strongly connected, more than one),
    function-level imports included: Tarjan's algorithm over the direct-import graph."""
    modules = sorted(m for m in graph.modules if m.startswith("nanolm"))
    edges = {m: sorted(n for n in graph.find_modules_directly_imported_by(m) if n.startswith("nanolm")) for m in modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(modules)))
    for m in modules:
        if m not in index:
            visit(m)
    return found


def test_the_circle_finder_finds_a_planted_circle():
    class Planted:  # a -> b -> c -> a, and d -> a outside the circle
        modules = {"nanolm.a", "nanolm.b", "nanolm.c", "nanolm.d"}
        edges = {"nanolm.a": {"nanolm.b"}, "nanolm.b": {"nanolm.c"}, "nanolm.c": {"nanolm.a"}, "nanolm.d": {"nanolm.a"}}

        def find_modules_directly_imported_by(self, m):
            return self.edges[m]

    assert circles(Planted()) == [["nanolm.a", "nanolm.b", "nanolm.c"]]


def test_no_module_of_nanolm_imports_itself_in_a_circle(graph):
    assert circles(graph) == []


def test_only_the_recording_part_of_the_profiler_reaches_torch(graph):
    """Reading, measuring, judging, assembling, comparing and showing a profile need no torch, even through a
    function-level import; recording it does (and does reach it, or this test would prove nothing)."""
    profiling = sorted(m for m in graph.modules if m.startswith("nanolm.profiling."))
    assert len(profiling) > 25
    reaching = {m: graph.find_shortest_chain(importer=m, imported="torch") for m in profiling}
    assert {m for m, chain in reaching.items() if chain and not m.startswith("nanolm.profiling.record")} == set()
    assert reaching["nanolm.profiling.record.session"] is not None


def test_profile_analyze_and_compare_do_not_load_torch(tmp_path):
    """The two commands that only read files, run as a user runs them: torch never enters the process."""
    trace = FIXTURES / "hta" / "sampled_rank-0.json.gz"
    if not trace.exists():
        trace = next((FIXTURES / "hta").glob("*.json*"))
    reports = sorted((FIXTURES / "cpu").glob("*.report.json"))[:2]
    code = (
        "import sys\n"
        "from nanolm.cli import main\n"
        "for argv in (['profile', 'analyze', sys.argv[1], '--json', sys.argv[2]],\n"
        "             ['profile', 'compare', sys.argv[3], sys.argv[4], '--json']):\n"
        "    try:\n"
        "        main(argv)\n"
        "    except SystemExit as e:\n"
        "        assert e.code in (0, None), (argv, e.code)\n"
        "print('TORCH', 'torch' in sys.modules, file=sys.stderr)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(trace), str(tmp_path / "r.json"), *map(str, reports)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr
    assert json.loads((tmp_path / "r.json").read_text())["gpu"] is not None  # the analysis ran
    assert "TORCH False" in out.stderr
