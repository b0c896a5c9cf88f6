"""bench/cold/cpu_busy.py: busy cores from /proc/stat, and their split by a cold run's notebooks."""

from __future__ import annotations

import datetime as dt
import importlib

import pytest

from memsafe_lib import config

LOG = """cold run of 01_construction_audit 02_training at cpu on abc1234
01_construction_audit start 2026-11-29T10:00:00Z
[memsafe 10:00:30 +0.5 min] something
02_training start 2026-11-29T10:01:00Z
02_training start 2026-11-29T12:00:00Z (resumed run)
end 2026-11-29T12:01:00Z
"""


@pytest.fixture
def cpu_busy(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.syspath_prepend(str(config.REPO_ROOT / "bench" / "cold"))
    return importlib.import_module("cpu_busy")


def _at(hms: str) -> dt.datetime:
    return dt.datetime.fromisoformat(f"2026-11-29T{hms}").replace(tzinfo=dt.UTC)


def test_busy_cores_from_two_proc_stat_readings(cpu_busy) -> None:
    # user nice system idle iowait irq softirq steal: busy 100+0+50+0+10+0 = 160, idle 800+40
    first = cpu_busy.cpu_times("cpu  100 0 50 800 40 10 0 0 0 0\ncpu0 1 2 3 4\n")
    assert first == (160, 1000)
    # 300 more busy and 100 more idle jiffies: 3/4 of the machine, 1.5 of 2 cores
    second = (first[0] + 300, first[1] + 400)
    assert cpu_busy.busy_cores(first, second, cores=2) == pytest.approx(1.5)
    assert cpu_busy.busy_cores(first, first, cores=2) == 0.0


def test_spans_end_at_the_next_start_or_the_end_line(cpu_busy) -> None:
    spans = cpu_busy.notebook_spans(LOG)
    assert [(n, s.strftime("%H:%M"), e.strftime("%H:%M")) for n, s, e in spans] == [
        ("01_construction_audit", "10:00", "10:01"), ("02_training", "10:01", "12:00"),
        ("02_training", "12:00", "12:01")]
    assert cpu_busy.notebook_spans("02_training start 2026-11-29T10:01:00Z\n")[0][2] is None


def test_samples_split_by_notebook_with_gaps_and_torn_lines_left_out(cpu_busy) -> None:
    lines = ["2026-11-29T09:59:50Z 0.100",  # before any notebook: its interval is not counted
             "2026-11-29T10:00:10Z 1.000",  # 20 s interval: > 3 x 5 s, left out
             "2026-11-29T10:00:15Z 1.000", "2026-11-29T10:00:20Z 2.000",  # 01: two 5 s intervals
             "2026-11-29T10:01:05Z 2.000",  # 45 s after the last: a gap, left out
             "2026-11-29T10:01:10Z 2.000", "2026-11-29T10:01:15Z 1.000",  # 02 first run
             "2026-11-29T12:00:05Z 1.000",  # the machine was away: a gap
             "2026-11-29T12:00:10Z 0.500",  # 02 resumed
             "2026-11-29T12:00:1"]  # torn by a kill
    samples = cpu_busy.read_samples(lines)
    assert len(samples) == 9
    table = cpu_busy.per_notebook(samples, cpu_busy.notebook_spans(LOG), cores=2, every=5.0, idle_below=1.5)
    rows = table.set_index("notebook")
    # 01: two 5 s intervals at 1 and 2 busy cores: 10 s, mean 1.5, 5 s below 1.5, idle 2*10 - 15 = 5 core-s
    assert rows.loc["01_construction_audit", "minutes"] == round(10 / 60, 1)
    assert rows.loc["01_construction_audit", "mean_busy_cores"] == 1.5
    # 02: 5 s at 2, 5 s at 1, 5 s at 0.5 (its two executions together): mean 3.5 / 3
    assert rows.loc["02_training", "mean_busy_cores"] == round(17.5 / 15, 2)
    assert rows.loc["all", "mean_busy_cores"] == round(32.5 / 25, 2)
    assert rows.loc["all", "idle_core_minutes"] == round((50 - 32.5) / 60, 1)
    assert rows.loc["01_construction_audit", "minutes_below_1.5_cores"] == round(5 / 60, 1)
    assert list(table.notebook) == ["01_construction_audit", "02_training", "all"]


def test_no_sample_in_any_notebook_is_an_error(cpu_busy) -> None:
    with pytest.raises(SystemExit, match="no samples"):
        cpu_busy.per_notebook([(_at("09:00:00"), 1.0), (_at("09:00:05"), 1.0)],
                              cpu_busy.notebook_spans(LOG), cores=2, every=5.0, idle_below=1.5)
