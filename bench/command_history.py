"""Every timed whole command in the ledger, oldest first (the README's and REPORT's history of
`make test` and `make reproduce` times).

``commands.csv`` (``bench/time_command.py``) keeps the latest row per command; the ledger
keeps each run with its CPU and code fingerprint, which this table lists. Runs nothing heavy.

    MEMSAFE_RECORD=1 .venv/bin/python bench/command_history.py
"""

from __future__ import annotations

import argparse

from report import save_report  # bench/report.py (scripts run from bench/)

from memsafe_lib import config
from memsafe_lib.ledger import read_ledger
from memsafe_lib.reporting.timings import command_history


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", default="cpu")
    args = parser.parse_args()
    table = command_history(read_ledger(config.scale_config(args.scale)))
    report = {"commands_timed": int(len(table)), "latest_utc": str(table.finished_utc.max()) if len(table) else ""}
    save_report("command-history", "command_history", args, [], report, table=table)


if __name__ == "__main__":
    main()
