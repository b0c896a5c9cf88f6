"""``memsafe verify``: prove that what is committed under ``artifacts/<scale>/`` came from
ledgered runs of this project, and that the report shows exactly what those artifacts say.

Checks, each failing with the file and what differs:

1. **Outputs.** For every artifact a ledger entry lists as an output, the file exists and its
   sha256 equals the hash in the *latest* entry that wrote it (a later run may overwrite an
   earlier one's file; an edit by hand or a half-finished run may not).
2. **No orphans.** Every result file under ``artifacts/<scale>/`` (caches and the ledger
   aside) is the output of some entry: nothing in the tree is unaccounted for.
3. **Fingerprints.** Every entry records code, data and settings fingerprints and a run id.
4. **Raw files.** Where the raw data are present, every raw file an entry names still has
   the recorded sha256 (skipped, and said so, without ``MEMSAFE_DATA_DIR``).
5. **Coverage.** Every (dataset, model, seed) of Table "main" the scale promises has a test
   metrics row, and every numbered notebook has an executed copy with a ledger entry.
6. **Report.** The generated blocks of ``paper/REPORT.md``, ``README.md`` and ``docs/running.md`` equal what the
   committed artifacts render to.
7. **One table of verdicts.** ``artifacts/<scale>/hypotheses.csv`` agrees with every
   per-notebook verdict file it names, and no retired per-folder table of verdicts
   (:data:`~memsafe_lib.evaluation.hypotheses.RETIRED_TABLES`) that is still present says
   otherwise. A retired table is no longer required to exist once its entry wrote it; a tree
   from before the one table (no ``hypotheses.csv``) is checked as it was.
8. **One code version.** Every committed result (benchmarks under ``bench/`` and the
   git-ignored gate checkpoints aside) was last written by an entry carrying one code
   fingerprint, so the tables come from one version of the code, not a patchwork of
   reruns; mixed versions fail, naming each with what it wrote. Whether that version is
   this checkout's code is noted, not failed (a user may well have edited the library).
9. **Predictions reproduce metrics.** In every results folder with ``predictions.csv.gz``
   beside ``metrics.csv``, unsafe AUROC and macro F1 recomputed with scikit-learn from the
   stored scores and states equal the stored metrics to :data:`RECOMPUTE_TOLERANCE` for a
   sample of (model, seed, split) rows. Files written at ten significant digits (before
   scores were stored exactly) are noted with their largest difference instead.

A result no current notebook writes is retired, not deleted by hand (``memsafe retire``,
:mod:`memsafe_lib.retire`): its ``retire`` entry names the file and why, and check 1 then
requires the file to be absent.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
from sklearn.metrics import f1_score, roc_auc_score

from memsafe_lib import config
from memsafe_lib.config import ScaleConfig
from memsafe_lib.estimators.registry import MODEL_GROUPS, seeds_for
from memsafe_lib.evaluation.hypotheses import RETIRED_TABLES, disagreements
from memsafe_lib.io import read_csv, sha256_file
from memsafe_lib.ledger import code_fingerprint
from memsafe_lib.notebooks import available
from memsafe_lib.reporting.paper_report import GENERATED_DOCUMENTS, render
from memsafe_lib.retire import latest_writers, present_results, stale_results

RESULT_SUFFIXES = (".csv", ".csv.gz", ".json", ".png", ".ipynb")
UNLEDGERED = {config.LEDGER_FILE}
"""Files in the tree that are the record itself, not results."""
UNCOMMITTED = (config.GATES,)
"""Folders whose outputs are ledgered but git-ignored (trained gate checkpoints, hundreds of MB):
a clean clone lacks them, so their absence is noted, not failed; a present file must still match."""


RECOMPUTE_TOLERANCE = 1e-9
RECOMPUTE_SAMPLE = 12
"""(model, seed, split) rows per predictions file that check 9 recomputes (spread over the file)."""


@dataclass
class Verification:
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    checked: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.problems

    def report(self) -> str:
        lines = [f"checked: {', '.join(f'{k} {v}' for k, v in self.checked.items())}"]
        lines += [f"note: {n}" for n in self.notes]
        lines += [f"FAIL: {p}" for p in self.problems] or ["all checks passed"]
        return "\n".join(lines)


def _result_files(root: Path) -> list[Path]:
    """Result files under ``root``; hidden files and folders are not results (caches, a running
    notebook's temporary copy, the .ipynb_checkpoints/ JupyterLab writes when one is opened)."""
    return sorted(p for p in root.rglob("*") if p.is_file() and p.name.endswith(RESULT_SUFFIXES)
                  and p.name not in UNLEDGERED and not any(part.startswith(".") for part in p.relative_to(root).parts))


def verify(scale: ScaleConfig, *, main_datasets: Sequence[str] | None = None, notebooks: Sequence[str] | None = None,
           documents: Sequence[Path] | None = None) -> Verification:
    """Run every check on ``artifacts/<scale>/`` (the committed tree, whatever ``--record``)."""
    out = Verification()
    artifacts = config.artifacts_dir()
    root = scale.recorded_dir
    ledger_file = root / config.LEDGER_FILE
    if not ledger_file.exists():
        out.problems.append(f"{ledger_file}: no ledger; nothing under {root} can be traced")
        return out
    entries = read_ledger_at(ledger_file)
    latest = latest_writers(entries)
    out.checked["ledger entries"] = len(entries)

    # 1. outputs match the latest entry that wrote them
    absent_uncommitted, retired, gone = 0, {f"{scale.name}/{r}" for r in RETIRED_TABLES}, 0
    for rel, writer in sorted(latest.items()):
        path, digest, kind = artifacts / rel, writer.digest, writer.entry.get("kind")
        if not rel.startswith(f"{scale.name}/"):
            continue
        if digest is None:
            if path.exists():
                out.problems.append(f"{path}: retired by ledger entry {kind!r} ({writer.entry['settings']['reason']}) "
                                    "but still present")
            gone += 1
        elif not path.exists() and rel.split("/")[1] in UNCOMMITTED:
            absent_uncommitted += 1
        elif not path.exists() and rel in retired:
            out.notes.append(f"{path}: retired per-folder table of verdicts, removed (the one table is "
                             f"{config.HYPOTHESES_FILE})")
        elif not path.exists():
            out.problems.append(f"{path}: listed by ledger entry {kind!r} but missing")
        elif sha256_file(path) != digest:
            out.problems.append(f"{path}: sha256 differs from ledger entry {kind!r} (edited, or written without a "
                                "ledger entry)")
    out.checked["artifacts"] = sum(1 for r, w in latest.items() if r.startswith(f"{scale.name}/") and w.digest)
    if gone:
        out.notes.append(f"{gone} earlier results retired by `retire` entries (each names its reason)")
    if absent_uncommitted:
        out.notes.append(f"{absent_uncommitted} ledgered outputs under {'/'.join(UNCOMMITTED)}/ are not committed "
                         "(git-ignored gate checkpoints) and were not checked")

    # 2. no orphans
    listed = set(latest)
    for path in _result_files(root):
        rel = path.relative_to(artifacts).as_posix()
        if rel not in listed:
            out.problems.append(f"{path}: no ledger entry lists it as an output")

    # 3. fingerprints
    for i, e in enumerate(entries):
        fp = e.get("fingerprint", {})
        missing = [k for k in ("code", "data", "settings", "run") if not fp.get(k)]
        if missing:
            out.problems.append(f"{ledger_file}: entry {i + 1} ({e.get('kind')!r}) lacks fingerprint {missing}")

    # 4. raw files
    data = config.data_dir()
    raw = {(f["path"], f["sha256"]) for e in entries for f in e.get("raw_files", [])}
    if raw and any((data / p).exists() for p, _ in raw):
        for path, digest in sorted(raw):
            if (data / path).exists() and sha256_file(data / path) != digest:
                out.problems.append(f"{data / path}: raw file sha256 differs from the ledger's")
        out.checked["raw files"] = len(raw)
    elif raw:
        out.notes.append(f"raw files not under {data}: their hashes were not re-checked")

    # 5. coverage
    _coverage(scale, root, entries, out, main_datasets, available() if notebooks is None else notebooks)

    # 6. generated documents
    docs = GENERATED_DOCUMENTS if documents is None else tuple(documents)
    if docs:
        for doc in docs:
            text = doc.read_text(encoding="utf-8")
            try:
                fresh = render(text, artifacts)
            except (FileNotFoundError, ValueError) as exc:
                out.problems.append(f"{doc}: a generated block cannot be rendered ({exc})")
                continue
            if fresh != text:
                out.problems.append(f"{doc}: generated blocks differ from what the artifacts give "
                                    "(run `memsafe report --record`)")
        out.checked["documents"] = len(docs)

    # 7. one table of hypotheses and gates
    if (root / config.HYPOTHESES_FILE).exists():
        out.problems.extend(disagreements(root))
    else:
        out.notes.append(f"no {root / config.HYPOTHESES_FILE} yet (a run before the one table of verdicts)")

    # 8. one code version
    _one_code_version(scale, ledger_file, entries, out)

    # 9. predictions reproduce metrics
    checked = 0
    for predictions in sorted(root.rglob("predictions.csv.gz")):
        if (predictions.parent / "metrics.csv").exists():
            checked += 1
            worst, exact = recompute_metrics(predictions.parent)
            if exact and worst[0] > RECOMPUTE_TOLERANCE:
                out.problems.append(f"{predictions}: {worst[1]} recomputed from the stored scores differs from "
                                    f"metrics.csv by {worst[0]:.3g} (tolerance {RECOMPUTE_TOLERANCE:g})")
            elif not exact:
                out.notes.append(f"{predictions}: scores stored at ten significant digits (older code); metrics "
                                 f"recompute within {worst[0]:.2g}")
    out.checked["predictions recomputed"] = checked
    return out


def _significant_digits(text: pd.Series) -> int:
    mantissa = text.str.replace(r"e.*$", "", regex=True).str.replace(r"[-.]", "", regex=True).str.lstrip("0")
    return int(mantissa.str.len().max()) if len(mantissa) else 0


def recompute_metrics(directory: Path, sample: int = RECOMPUTE_SAMPLE) -> tuple[tuple[float, str], bool]:
    """Recompute unsafe AUROC and macro F1 (scikit-learn) for ``sample`` (model, seed, split) rows
    of ``directory``'s metrics from its predictions. Returns ((largest absolute difference, where),
    whether the scores are stored beyond ten significant digits)."""
    raw = pd.read_csv(directory / "predictions.csv.gz", dtype={"unsafe_prob": str})  # one read: digits, then floats
    text = raw.unsafe_prob.dropna()
    raw["unsafe_prob"] = raw.unsafe_prob.astype(float)
    metrics = read_csv(directory / "metrics.csv")
    rows = metrics.dropna(subset=["unsafe_auroc"])
    if len(rows):
        rows = rows.iloc[sorted({round(i * (len(rows) - 1) / max(sample - 1, 1)) for i in range(sample)})]
    worst = (0.0, "")
    groups = raw.groupby(["model", "seed", "split"])
    for r in rows.itertuples():
        if (r.model, r.seed, r.split) not in groups.groups:
            missing = f"{r.model} seed {r.seed} {r.split}: in metrics.csv, not in the predictions"
            worst = max(worst, (float("inf"), missing))
            continue
        group = groups.get_group((r.model, r.seed, r.split))
        unsafe = group.unsafe.astype(str).str.lower() == "true"
        states = sorted(set(group.state))
        ours = {"unsafe_auroc": roc_auc_score(unsafe, group.unsafe_prob),
                "macro_f1": f1_score(group.state, group.pred_state, labels=states, average="macro", zero_division=0)}
        for metric, value in ours.items():
            diff = abs(value - float(getattr(r, metric)))
            if diff >= worst[0]:
                worst = (diff, f"{metric} of {r.model} seed {r.seed} {r.split}")
    return worst, _significant_digits(text) > 10


def _one_code_version(scale: ScaleConfig, ledger_file: Path, entries: Sequence[dict], out: Verification) -> None:
    versions: dict[str, set[str]] = {}
    for rel, writer in present_results(scale.name, latest_writers(entries)):
        versions.setdefault(writer.code, set()).add(rel.split("/")[1])
    if len(versions) > 1:
        named = "; ".join(f"{code[:12]}: {', '.join(sorted(folders))}" for code, folders in
                          sorted(versions.items(), key=lambda kv: sorted(kv[1])))
        stale = stale_results(scale.name, entries)
        hint = (f"; {len(stale)} of them were not written again by the latest notebook run: if no notebook "
                f"writes them any more, `memsafe retire --record --reason ...` them (`memsafe retire --stale` "
                "lists them)") if stale else ""
        out.problems.append(f"{ledger_file}: the committed results come from {len(versions)} code versions "
                            f"({named}); rerun the older ones on one code version (`make reproduce`){hint}")
    elif versions:
        (code,) = versions
        same = "is" if code == code_fingerprint() else "differs from"
        out.notes.append(f"one code version ({code[:12]}) wrote every committed result; it {same} this checkout's code")


def read_ledger_at(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _coverage(scale: ScaleConfig, root: Path, entries: Sequence[dict], out: Verification,
              main_datasets: Sequence[str] | None, notebooks: Sequence[str]) -> None:
    kinds = {e["kind"] for e in entries}
    for name in notebooks:
        executed = root / name / f"{name}.ipynb"
        if not executed.exists():
            out.problems.append(f"{executed}: notebook {name} has no executed copy at scale {scale.name}")
        elif f"notebook:{name}" not in kinds:
            out.problems.append(f"{config.LEDGER_FILE}: no 'notebook:{name}' entry at scale {scale.name}")
    datasets = list(scale.datasets if main_datasets is None else main_datasets)
    frames = [read_csv(p) for d in datasets for p in [root / config.EVALUATE / d / "size-matched" / "metrics.csv"]
              if p.exists()]
    metrics = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(
        columns=["dataset", "model", "seed", "split"])
    have = set(zip(metrics.dataset, metrics.model, metrics.seed, metrics.split, strict=True))
    missing = [f"{d}/{m}/seed {s}" for d in datasets for m in MODEL_GROUPS["all"] for s in seeds_for(m, scale.seeds)
               if (d, m, s, "test") not in have]
    if missing:
        out.problems.append(f"{root / config.EVALUATE}: no test metrics for {len(missing)} promised runs, e.g. "
                            f"{', '.join(missing[:5])}")
    out.checked["promised runs"] = sum(len(seeds_for(m, scale.seeds)) for m in MODEL_GROUPS["all"]) * len(datasets)
