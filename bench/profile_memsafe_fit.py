"""Where one MemSafe fit spends its time: a cProfile of ``MemSafe.fit`` + ``predict`` on one dataset.

MemSafe's own fits are the largest share of a cpu reproduction (bench/notebook_steps.py), so
this names the functions to speed up. Stage A encodings come from the scale's caches (run
notebook 02 first); the Stage B point is the one notebook 02 selected. Writes the top
functions by own time and by cumulative time.

    MEMSAFE_RECORD=1 .venv/bin/python bench/profile_memsafe_fit.py --dataset musique
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time

import pandas as pd
from cached_inputs import stage_b_inputs  # bench/cached_inputs.py
from report import save_report  # bench/report.py (scripts run from bench/)

from memsafe_lib import config
from memsafe_lib.estimators.memsafe import MemSafe
from memsafe_lib.estimators.setmodel import SetModelConfig
from memsafe_lib.threads import configure_threads


def top_functions(profile: cProfile.Profile, key: str, n: int) -> list[dict[str, object]]:
    stats = pstats.Stats(profile)
    rows = []
    for (file, line, name), (_cc, calls, own, cumulative, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        root = f"{config.REPO_ROOT}/"
        where = file.split("site-packages/")[-1].removeprefix(root)
        rows.append({"function": f"{where}:{line}({name})", "calls": calls, "own_s": round(own, 2),
                     "cumulative_s": round(cumulative, 2)})
    return sorted(rows, key=lambda r: -float(r[key]))[:n]  # type: ignore[arg-type]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="musique")
    parser.add_argument("--scale", default="cpu")
    parser.add_argument("--seed", type=int, default=17)
    parser.add_argument("--top", type=int, default=15)
    args = parser.parse_args()
    threads = configure_threads()
    scale = config.scale_config(args.scale)
    inputs = stage_b_inputs(args.dataset, scale)
    encodings, splits, point = inputs.encodings, inputs.splits, inputs.point
    model = MemSafe(encodings, args.seed, SetModelConfig(epochs=scale.neural.stage_b_epochs, **point))
    profile = cProfile.Profile()
    start = time.perf_counter()
    profile.enable()
    model.fit(splits["train"], splits["validation"])
    model.predict(splits["test"])
    profile.disable()
    seconds = time.perf_counter() - start
    own = pd.DataFrame(top_functions(profile, "own_s", args.top)).assign(rank_by="own time")
    cumulative = pd.DataFrame(top_functions(profile, "cumulative_s", args.top)).assign(rank_by="cumulative time")
    report = {"dataset": args.dataset, "seed": args.seed, "seconds_profiled": round(seconds, 1),
              "train_memories": len(splits["train"]), "epochs": scale.neural.stage_b_epochs,
              "torch_threads": threads[1], "point": point}
    save_report("profile-memsafe-fit", f"profile_memsafe_fit_{args.dataset}", args, inputs.raw_files, report,
                table=pd.concat([own, cumulative], ignore_index=True))


if __name__ == "__main__":
    main()
