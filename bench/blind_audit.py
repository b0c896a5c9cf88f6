"""The blind audit of every construction: surface controls, the question-blind controls and the
question-only control, fitted on each construction's own train split and scored on validation
and test, with the memorisation split (AUROC on memories none of whose units occur in training;
per-unit evidence AUROC on units seen and unseen in training).

Rows: the paper's size-matched construction and our blind-matched one on the three QA datasets,
and the clinical construction on both MIMIC sources at the scale's table settings. The design
evidence for blind matching is validation-only: beside it, the simplest remedy the diagnosis
suggests (``swap-random``: each evidence unit an unsafe memory lost is replaced by a random
evidence unit of another question of its split, the rest as size-matched), whose blind controls
are reported on validation only.

    MEMSAFE_RECORD=1 .venv/bin/python bench/blind_audit.py --scale cpu
"""

from __future__ import annotations

import argparse
import random
from dataclasses import replace

import pandas as pd
from report import save_report  # bench/report.py (scripts run from bench/)

from memsafe_lib import config
from memsafe_lib.evaluation.audit import AUDIT_CONTROLS, CHANCE_BAND, blind_rows
from memsafe_lib.threads import configure_threads
from memsafe_lib.variants.construction import MemoryUnit, Variant, by_split
from memsafe_lib.variants.store import build

SWAP_SALT = "memsafe-bench-swap-random-v1"


def swap_random(variants: list[Variant]) -> list[Variant]:
    """The prototype remedy: in every unsafe size-matched memory, ``missing_count`` distractors
    (the last ones, which size matching added in place of the lost evidence) become random
    evidence units of other questions of the same split."""
    pools = {split: [u for v in vs if not v.unsafe for u in v.units if u.is_evidence]
             for split, vs in by_split(variants).items()}
    out = []
    for v in variants:
        if not v.unsafe:
            out.append(v)
            continue
        rng = random.Random(f"{SWAP_SALT}:{v.variant_id}")
        foreign = [u for u in pools[v.split] if not u.unit_id.startswith(f"{v.base_id}:")]
        slots = [i for i, u in enumerate(v.units) if not u.is_evidence][-v.missing_count:]
        units = list(v.units)
        picks = rng.sample(foreign, len(slots)) if len(foreign) >= len(slots) else rng.choices(foreign, k=len(slots))
        for i, pick in zip(slots, picks, strict=True):
            units[i] = MemoryUnit(pick.unit_id, pick.title, pick.text, False, i, units[i].source_position)
        out.append(replace(v, units=tuple(units), construction="swap-random"))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", default="cpu")
    parser.add_argument("--datasets", default=",".join(config.FAMILY_A_DATASETS))
    parser.add_argument("--clinical", action=argparse.BooleanOptionalAction, default=True)
    args = parser.parse_args()
    configure_threads()
    scale = config.scale_config(args.scale)
    rows, raw = [], {}
    for dataset in args.datasets.split(","):
        for construction in ("size-matched", "blind-matched"):
            loaded, result = build(dataset, construction, scale)
            raw.update({f.path: f for f in loaded.files})
            rows += blind_rows(result.variants, AUDIT_CONTROLS, dataset=dataset, construction=construction)
            print(f"{dataset}/{construction}: done", flush=True)
            if construction == "size-matched":  # design evidence: validation only
                rows += blind_rows(swap_random(result.variants), AUDIT_CONTROLS, ("validation",), dataset=dataset,
                                   construction="swap-random")
    if args.clinical:
        for setting in scale.clinical.settings:
            loaded, result = build(setting.dataset, "clinical", scale, clinical=setting)
            raw.update({f.path: f for f in loaded.files})
            rows += blind_rows(result.variants, AUDIT_CONTROLS, dataset=setting.dataset,
                               construction=setting.construction)
            print(f"{setting.dataset}/{setting.construction}: done", flush=True)
    table = pd.DataFrame(rows)
    test = table[table.split == "test"]
    clean = {f"{d}/{c}": bool(g.within_chance.all()) for (d, c), g in test.groupby(["dataset", "construction"])}
    summary = {"chance_band": list(CHANCE_BAND), "controls": list(AUDIT_CONTROLS), "clean_on_test": clean,
               "max_distance_from_half_on_test": {f"{d}/{c}": float((g.unsafe_auroc - 0.5).abs().max())
                                                 for (d, c), g in test.groupby(["dataset", "construction"])}}
    save_report("blind-audit", "blind_audit", args, list(raw.values()), summary, table=table)


if __name__ == "__main__":
    main()
