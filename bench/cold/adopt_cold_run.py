"""Bring a part of a cold reproduction (a clone made by ``bench/cold/cold_run.sh``) into this checkout.

Copies the files the clone's notebooks changed under ``artifacts/<scale>/``, merges its ledger
entries and ``run_times.csv`` rows, and refuses when the clone's runs carry another code
fingerprint than this checkout's (``memsafe_lib/reporting/adopt.py``). Then regenerate the
time tables and the report, and verify:

    .venv/bin/python bench/cold/adopt_cold_run.py ../cold-a
    cd bench && MEMSAFE_RECORD=1 ../.venv/bin/python notebook_steps.py --scale cpu && cd ..
    .venv/bin/memsafe report --record && .venv/bin/memsafe verify --scale cpu
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from memsafe_lib import config
from memsafe_lib.ledger import code_fingerprint
from memsafe_lib.reporting.adopt import adopt


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("clone", type=Path, help="the cold-run clone (bench/cold/cold_run.sh's CLONE_DIR)")
    parser.add_argument("--scale", default="cpu")
    args = parser.parse_args()
    try:
        done = adopt(args.clone.resolve(), config.REPO_ROOT, args.scale, code_fingerprint())
    except (ValueError, FileNotFoundError) as error:
        print(f"adopt_cold_run: {error}", file=sys.stderr)
        return 2
    print(f"adopted {', '.join(done.notebooks)}: {len(done.copied)} files copied, {len(done.deleted)} deleted, "
          f"{done.ledger_entries} ledger entries added")
    return 0


if __name__ == "__main__":
    sys.exit(main())
