"""How long the ``memsafe`` command takes to start: importing ``memsafe_lib.cli`` in a fresh
process (median of ``--repeats``), for this checkout and, with ``--before COMMIT``, for that
commit in a temporary git worktree, in one run on one machine.

    MEMSAFE_RECORD=1 .venv/bin/python bench/startup.py --before 4598325

Every verb pays this before its first line; ``python -X importtime`` names what it is made of
(the ``top`` column: the slowest module imported for the first time, cumulative seconds).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
from report import save_report  # bench/report.py (scripts run from bench/)
from score_stream import cpu_name  # bench/score_stream.py

from memsafe_lib import config


def import_seconds(root: Path, repeats: int) -> tuple[float, str]:
    env = {"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"}
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import memsafe_lib.cli"], check=True, env=env, cwd=root)
        times.append(time.perf_counter() - start)
    profile = subprocess.run([sys.executable, "-X", "importtime", "-c", "import memsafe_lib.cli"], check=True,
                             env=env, cwd=root, capture_output=True, text=True).stderr.splitlines()
    rows = [line.split("|") for line in profile if line.startswith("import time:") and "cumulative" not in line]
    third_party = [(int(r[1]), r[2].strip()) for r in rows if not r[2].strip().startswith("memsafe_lib")]
    top = max(third_party) if third_party else (0, "")
    return statistics.median(times), f"{top[1]} ({top[0] / 1e6:.1f} s)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", default="cpu")
    parser.add_argument("--before", default=None, help="a commit to measure beside this checkout")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        checkouts = [("this checkout", config.REPO_ROOT)]
        if args.before:
            subprocess.run(["git", "worktree", "add", "--detach", tmp + "/before", args.before], check=True,
                           cwd=config.REPO_ROOT, capture_output=True)
            checkouts.insert(0, (f"before ({args.before})", Path(tmp) / "before"))
        try:
            for label, root in checkouts:
                seconds, top = import_seconds(root, args.repeats)
                rows.append({"code": label, "seconds_import_cli": seconds, "top": top, "cpu": cpu_name()})
                print(rows[-1], flush=True)
        finally:
            if args.before:
                subprocess.run(["git", "worktree", "remove", "--force", tmp + "/before"], cwd=config.REPO_ROOT)
    table = pd.DataFrame(rows)
    save_report("startup", "startup", args, [], {"rows": table.to_dict(orient="records")}, table=table)


if __name__ == "__main__":
    main()
