"""Every verdict the prose states about a generated number holds on the committed artifacts.

`memsafe report` refreshes the numbers of README, REPORT and docs after a rerun, but not the
words around them: "the interval excludes zero", "MemSafe leads LexSet", "every blind model
sits at 0.5" stay as written while the numbers move (a rerun on another CPU flipped bootstrap
verdicts). So each such sentence carries a claim, an invisible comment beside it:

    <!-- memsafe:claim cpu/02_training/bootstrap_memsafe.csv dataset=musique model_b=lexset metric=unsafe_auroc lo > 0 -->

Each side is a value spec as ``memsafe:value`` reads it (file, filters, column, ``agg=``,
``abs``), a literal (a number, or a word such as ``pass`` compared by ``==``/``!=``), or the
difference of two specs (``A - B``); between them one operator (``< <= > >= == !=``).
Booleans read as 1 and 0. A
claim over many rows takes an aggregate: "all above x" is ``agg=min ... > x``. This test
reads every claim of the generated documents and fails, naming document, line and both
values, on every claim that no longer holds: reword the sentence, then its claim. Before a new
run's artifacts are adopted, ``MEMSAFE_CLAIMS_ARTIFACTS=<its clone>/artifacts`` checks the prose
against them (a claim on a table that run has not written yet fails to read).
"""

from __future__ import annotations

import math
import operator
import os
import re
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from memsafe_lib import config
from memsafe_lib.reporting.paper_report import GENERATED_DOCUMENTS, render_value

CLAIMS_ARTIFACTS = Path(os.environ.get("MEMSAFE_CLAIMS_ARTIFACTS", config.REPO_ROOT / "artifacts"))
"""The committed artifacts; another run's (its clone's ``artifacts/``) to check the prose against it."""
CLAIM = re.compile(r"<!-- memsafe:claim (?P<spec>[^\n]*?) -->")
OPERATORS: dict[str, Callable[[Any, Any], bool]] = {
    "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge, "==": operator.eq, "!=": operator.ne}


Value = float | str


def _value(tokens: list[str], artifacts: Path) -> Value:
    """A number (booleans as 1/0) or a text cell; one token that is no value spec is a literal (0.5, pass)."""
    if len(tokens) == 1:
        try:
            return float(tokens[0])
        except ValueError:
            if not any(c in tokens[0] for c in "/="):
                return tokens[0]  # a literal word: pass, fail, True
    raw = render_value(" ".join(shlex.quote(t) for t in [*tokens, ""]), artifacts)
    try:
        number = float({"True": "1", "False": "0"}.get(raw, raw))
    except ValueError:
        return raw
    if math.isnan(number):  # an aggregate over no rows, or an empty cell: nothing to judge
        raise ValueError(f"{' '.join(tokens)!r} reads no number (no row matches, or the cell is empty)")
    return number


def _side(tokens: list[str], artifacts: Path) -> Value:
    """One value, or the difference of two (``A - B``)."""
    if "-" in tokens:
        i = tokens.index("-")
        a, b = _value(tokens[:i], artifacts), _value(tokens[i + 1:], artifacts)
        if isinstance(a, str) or isinstance(b, str):
            raise ValueError(f"cannot subtract text: {a!r} - {b!r}")
        return a - b
    return _value(tokens, artifacts)


def check_claim(spec: str, artifacts: Path) -> tuple[bool, Value, Value]:
    """(holds, left value, right value) of one claim; ValueError where it cannot be read."""
    tokens = shlex.split(spec)
    ops = [i for i, t in enumerate(tokens) if t in OPERATORS]
    if len(ops) != 1 or ops[0] == 0 or ops[0] == len(tokens) - 1:
        raise ValueError(f"claim {spec!r}: needs one operator of {sorted(OPERATORS)} between two sides")
    i = ops[0]
    left, right = _side(tokens[:i], artifacts), _side(tokens[i + 1:], artifacts)
    if isinstance(left, str) != isinstance(right, str) or (isinstance(left, str) and tokens[i] not in ("==", "!=")):
        raise ValueError(f"claim {spec!r}: text compares only with text, by == or !=")
    return OPERATORS[tokens[i]](left, right), left, right


def claims(text: str) -> list[tuple[int, str]]:
    """(line number, spec) of every claim in a document."""
    return [(text.count("\n", 0, m.start()) + 1, m.group("spec")) for m in CLAIM.finditer(text)]


def test_a_claim_compares_a_value_with_a_number_or_another_value(tmp_path: Path) -> None:
    (tmp_path / "cpu").mkdir()
    pd.DataFrame({"model": ["memsafe", "lexset", "blind_set", "blind_bow"], "auroc": [0.84, 0.76, 0.5, 0.5],
                  "excludes_zero": [True, False, False, False],
                  "state": ["pass", "fail", "pass", "pass"]}).to_csv(tmp_path / "cpu" / "t.csv", index=False)
    holds = ["cpu/t.csv model=memsafe auroc > cpu/t.csv model=lexset auroc",
             "cpu/t.csv model=blind_set,blind_bow auroc agg=max == 0.5",
             "cpu/t.csv model=memsafe excludes_zero == 1", "cpu/t.csv model=lexset excludes_zero == 0"]
    for spec in holds:
        assert check_claim(spec, tmp_path)[0], spec
    assert check_claim("cpu/t.csv model=lexset auroc >= cpu/t.csv model=memsafe auroc", tmp_path) == (False, 0.76, 0.84)
    holds, gap, _ = check_claim("cpu/t.csv model=memsafe auroc - cpu/t.csv model=lexset auroc < 0.1", tmp_path)
    assert holds and gap == pytest.approx(0.08)
    assert check_claim("cpu/t.csv model=memsafe state == pass", tmp_path)[0]
    assert not check_claim("cpu/t.csv model=lexset state == pass", tmp_path)[0]
    assert not check_claim("cpu/t.csv model=memsafe,lexset auroc agg=min > 0.8", tmp_path)[0]
    for bad in ("cpu/t.csv model=memsafe auroc 0.5", "cpu/t.csv model=memsafe auroc > < 1", "> 0.5",
                "cpu/t.csv auroc > 0.5", "cpu/t.csv model=memsafe state > pass",
                "cpu/t.csv model=memsafe state == 1", "cpu/t.csv model=nobody auroc agg=max < 1"):  # no operator, two, no left side, four rows
        # without agg=, text ordered, text against a number
        with pytest.raises(ValueError):
            check_claim(bad, tmp_path)
    assert claims("a\n<!-- memsafe:claim x y > 1 -->\nb <!-- memsafe:claim z == 0 -->") == [
        (2, "x y > 1"), (3, "z == 0")]


def _shown(value: Value) -> str:
    return f"{value:.6g}" if isinstance(value, float) else repr(value)


def broken_claims(text: str, name: str, artifacts: Path) -> list[str]:
    """``name:line: spec (left …, right …)`` for each claim of ``text`` that does not hold."""
    broken = []
    for line, spec in claims(text):
        holds, left, right = check_claim(spec, artifacts)
        if not holds:
            broken.append(f"{name}:{line}: {spec} (left {_shown(left)}, right {_shown(right)})")
    return broken


def test_a_broken_claim_is_named_with_both_values_whether_number_or_word(tmp_path: Path) -> None:
    """A failing word claim (H4 status == fail after a rerun) is reported, not a format error."""
    (tmp_path / "cpu").mkdir()
    pd.DataFrame({"id": ["H4"], "status": ["pass"], "delta": [0.25]}).to_csv(tmp_path / "cpu" / "h.csv", index=False)
    text = ("H4 fails <!-- memsafe:claim cpu/h.csv id=H4 status == fail -->\n"
            "by a lot <!-- memsafe:claim cpu/h.csv id=H4 delta < 0 -->\nholds <!-- memsafe:claim cpu/h.csv id=H4 delta > 0 -->")
    assert broken_claims(text, "R.md", tmp_path) == [
        "R.md:1: cpu/h.csv id=H4 status == fail (left 'pass', right 'fail')",
        "R.md:2: cpu/h.csv id=H4 delta < 0 (left 0.25, right 0)"]


@pytest.mark.parametrize("document", GENERATED_DOCUMENTS, ids=lambda p: p.name)
def test_every_claim_of_the_committed_documents_holds(document: Path) -> None:
    broken = broken_claims(document.read_text(encoding="utf-8"), document.name, CLAIMS_ARTIFACTS)
    assert not broken, "sentences whose verdict the numbers no longer support:\n" + "\n".join(broken)


def test_the_report_states_its_verdicts_as_claims() -> None:
    """The bootstrap, blind-audit and hypothesis verdicts of REPORT are checked, not only written."""
    report = next(p for p in GENERATED_DOCUMENTS if p.name == "REPORT.md")
    assert len(claims(report.read_text(encoding="utf-8"))) >= 20
