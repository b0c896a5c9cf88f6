"""bench/cold/interrupted_run.py reads a killed notebook's minutes from the cold run's log."""

from __future__ import annotations

import datetime as dt
import importlib

import pytest

from memsafe_lib import config

LOG = """01_construction_audit start 2026-11-28T23:00:50Z
[memsafe 23:17:28 +16.6 min] notebook 01_construction_audit at scale cpu: done in 16.5 min
02_training start 2026-11-28T23:17:29Z
[memsafe 23:55:43 +38.1 min] musique: 18 fits side by side: done in 7.8 min
[memsafe 00:16:35 +59.0 min] hotpotqa: mean_pool seed 43: fit and predict: done in 41.3 s
[memsafe 00:15:15 +57.8 min] hotpotqa: mean_pool seed 17: fit and predict ...
[memsafe 00:45:06 +87.6 min] 2wikimultihopqa: blind_set seed 17: fit and predict ...
02_training start 2026-11-29T07:26:05Z (resumed run)
[memsafe 07:28:52 +2.6 min] 2wikimultihopqa: blind_set seed 17: fit and predict: done in 1.6 min
"""


@pytest.fixture
def interrupted_run(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.syspath_prepend(str(config.REPO_ROOT / "bench" / "cold"))
    return importlib.import_module("interrupted_run")


def test_minutes_before_the_kill_span_midnight_and_out_of_order_lines(interrupted_run) -> None:
    start, last = interrupted_run.minutes_before_kill(LOG, "02_training")
    assert start == dt.datetime(2026, 11, 28, 23, 17, 29, tzinfo=dt.UTC)
    # the last stamp before the resumed execution, on the next day; 00:15:15 printed after
    # 00:16:35 (workers side by side) neither moves it back nor adds a day
    assert last == dt.datetime(2026, 11, 29, 0, 45, 6, tzinfo=dt.UTC)
    assert (last - start).total_seconds() / 60 == pytest.approx(87 + 37 / 60)


def test_every_killed_execution_of_a_notebook_counts(interrupted_run) -> None:
    # a notebook on a slow CPU killed twice, resumed twice (the second time on another machine)
    log = LOG.replace("[memsafe 07:28:52 +2.6 min] 2wikimultihopqa: blind_set seed 17: fit and predict: done in 1.6 min\n",
                      "[memsafe 07:28:52 +2.6 min] 2wikimultihopqa: blind_set seed 17: fit and predict: done in 1.6 min\n"
                      "[memsafe 09:56:05 +150.0 min] 2wikimultihopqa: Stage A encode ...\n"
                      "02_training start 2026-11-29T13:00:00Z (resumed run on AMD EPYC)\n"
                      "[memsafe 13:10:00 +10.0 min] notebook 02_training at scale cpu: done in 10.0 min\n")
    parts = interrupted_run.killed_parts(log, "02_training")
    assert [(a.strftime("%d %H:%M:%S"), b.strftime("%d %H:%M:%S")) for a, b in parts] == [
        ("28 23:17:29", "29 00:45:06"), ("29 07:26:05", "29 09:56:05")]
    assert interrupted_run.minutes_before_kill(log, "02_training") == parts[0]


def test_a_notebook_started_again_without_the_resumed_mark_is_refused(interrupted_run) -> None:
    log = LOG.replace("02_training start 2026-11-29T07:26:05Z (resumed run)", "02_training start 2026-11-29T07:26:05Z")
    with pytest.raises(SystemExit, match="without a '\\(resumed run\\)' mark"):
        interrupted_run.killed_parts(log, "02_training")


def test_a_notebook_that_was_not_resumed_is_refused(interrupted_run) -> None:
    with pytest.raises(SystemExit, match="no resumed execution"):
        interrupted_run.minutes_before_kill(LOG, "01_construction_audit")
    with pytest.raises(SystemExit, match="no '03_ablations start' line"):
        interrupted_run.minutes_before_kill(LOG, "03_ablations")


def test_cold_table_adds_the_minutes_before_the_kill_to_the_resumed_row(interrupted_run) -> None:
    import pandas as pd

    run_times = pd.DataFrame({
        "notebook": ["01_construction_audit", "02_training", "03_ablations"],
        "minutes": [16.5, 51.2, 44.2], "code": ["abc"] * 3, "cpu": ["Xeon"] * 3, "bf16_units": [True] * 3})
    interrupted = pd.DataFrame({"notebook": ["02_training"], "minutes_before_kill": [87.6],
                                "minutes_resumed": [51.2], "code": ["abc"]})
    table = interrupted_run.cold_table(run_times, interrupted)
    assert list(table.notebook) == ["01_construction_audit", "02_training", "03_ablations", "all"]
    assert table.minutes.tolist() == pytest.approx([16.5, 87.6 + 51.2, 44.2, 16.5 + 87.6 + 51.2 + 44.2])
    assert table.interrupted.tolist() == [False, True, False, True]
    assert table.notebooks.iloc[-1] == 3


def test_cold_table_refuses_an_interruption_of_another_code_version(interrupted_run) -> None:
    import pandas as pd

    run_times = pd.DataFrame({"notebook": ["02_training"], "minutes": [51.2], "code": ["new"],
                              "cpu": ["Xeon"], "bf16_units": [True]})
    interrupted = pd.DataFrame({"notebook": ["02_training"], "minutes_before_kill": [87.6],
                                "minutes_resumed": [51.2], "code": ["old"]})
    with pytest.raises(SystemExit, match="02_training"):
        interrupted_run.cold_table(run_times, interrupted)


READER_LOG = """06_reader_gating start 2026-12-02T00:45:00Z
[memsafe 00:46:58 +1.9 min] reader qwen and judge qwen on 90 memories ...
06_reader_gating start 2026-12-02T01:39:27Z (resumed run on AMD EPYC)
[memsafe 01:49:52 +9.8 min] reader qwen and judge qwen on 90 memories: done in 9.2 min
"""
# the busy-core sampler's lines: busy until the machine went at 01:18:14, then the resumed run
SAMPLES = """2026-12-02T00:44:54Z 0.225
2026-12-02T00:47:04Z 1.975
2026-12-02T01:18:04Z 1.994
2026-12-02T01:18:14Z 1.985
2026-12-02T01:39:38Z 0.022
2026-12-02T01:40:08Z 0.537
"""


def test_the_sampler_extends_a_killed_part_past_the_last_logged_phase(interrupted_run) -> None:
    # notebook 06 logs one line per phase and caches every generation as it ends: the log's
    # last stamp (00:46:58) misses the 31 minutes of generations the resumed run read back
    [(start, logged)] = interrupted_run.killed_parts(READER_LOG, "06_reader_gating")
    assert logged == dt.datetime(2026, 12, 2, 0, 46, 58, tzinfo=dt.UTC)
    [(start_b, machine)] = interrupted_run.killed_parts(READER_LOG, "06_reader_gating", samples=SAMPLES)
    assert start_b == start
    # the last sample before the resumed execution started, not one of the resumed run's
    assert machine == dt.datetime(2026, 12, 2, 1, 18, 14, tzinfo=dt.UTC)


def test_the_sampler_never_moves_a_killed_part_back(interrupted_run) -> None:
    # a sampler that stopped before the last logged step leaves the log's end
    early = "2026-12-02T00:45:10Z 1.9\n"
    [(_, end)] = interrupted_run.killed_parts(READER_LOG, "06_reader_gating", samples=early)
    assert end == dt.datetime(2026, 12, 2, 0, 46, 58, tzinfo=dt.UTC)


def test_cold_run_history_keeps_earlier_runs_and_replaces_a_run_kept_again(monkeypatch: pytest.MonkeyPatch) -> None:
    import pandas as pd

    monkeypatch.syspath_prepend(str(config.REPO_ROOT / "bench" / "cold"))
    history = importlib.import_module("cold_run_history")

    def cold(code: str, cpu: str, minutes: float) -> pd.DataFrame:
        return pd.DataFrame({"notebook": ["01_construction_audit", "all"], "minutes": [minutes, minutes],
                             "cpu": [cpu, cpu], "code": [code, code]})

    kept = history.add_run(None, cold("old", "Xeon", 10.0))
    kept = history.add_run(kept, cold("new", "EPYC", 12.0))
    kept = history.add_run(kept, cold("new", "EPYC", 13.0))  # the same run kept again
    assert kept.groupby("run").size().to_dict() == {"new on EPYC": 2, "old on Xeon": 2}
    assert kept[kept.run == "new on EPYC"].minutes.tolist() == [13.0, 13.0]
    assert kept[kept.run == "old on Xeon"].minutes.tolist() == [10.0, 10.0]
    with pytest.raises(SystemExit, match="'all' row"):
        history.add_run(None, cold("x", "y", 1.0).iloc[:1])


def test_a_resumed_mark_naming_a_cpu_with_parentheses_is_read(interrupted_run) -> None:
    # the Xeon calls itself "Intel(R) Xeon(R) Processor": the mark's own ")" is not the first one
    log = LOG.replace("(resumed run)", "(resumed run on Intel(R) Xeon(R) Processor)")
    start, last = interrupted_run.minutes_before_kill(log, "02_training")
    assert (start.strftime("%d %H:%M:%S"), last.strftime("%d %H:%M:%S")) == ("28 23:17:29", "29 00:45:06")


WARM_LOG = """cold run of 01_construction_audit 03_ablations at cpu on abc
untimed warm-up of the Stage B grid check's Stage A: 2026-12-07T23:58:54Z
[memsafe 23:59:01 +5.7 s] 2wikimultihopqa/size-matched: 3486 variants built and stored (x.variants.jsonl.gz)
bi-encoder:  78%|#######8  | 5248/6759 [01:36<00:50, 30.10it/s]\rbi-encoder: 100%|##########| 6759/6759
[memsafe 00:08:50 +9.8 min] Stage A 2wikimultihopqa+hotpotqa+musique (seed 17): fine-tune on 24,000 pairs, 2 fold encoders side by side ...
[memsafe 00:26:31 +17.7 min] Stage A 2wikimultihopqa+hotpotqa+musique (seed 17): fine-tune on 24,000 pairs, 2 fold encoders side by side: done in 17.7 min
warm-up done: 2026-12-08T00:48:32Z
01_construction_audit start 2026-12-08T00:48:40Z
[memsafe 01:00:00 +11.3 min] Stage A musique (seed 17): fine-tune on 24,000 pairs, 2 fold encoders side by side ...
"""
EMBEDDINGS_END = r"Stage A .*: fine-tune on .* side by side \.\.\.$"


def test_a_warm_up_step_is_the_gap_before_its_line_across_midnight(interrupted_run) -> None:
    line, minutes = interrupted_run.warm_up_step(WARM_LOG.replace("\r", "\n"), EMBEDDINGS_END)
    # 23:59:01 -> 00:08:50 by hand: 9 min 49 s; the "...: done" line does not match, nor the
    # notebook's own line after "warm-up done"
    assert minutes == pytest.approx(9 + 49 / 60)
    assert line.startswith("[memsafe 00:08:50")
    with pytest.raises(SystemExit, match="inside an untimed warm-up"):
        interrupted_run.warm_up_step(WARM_LOG, r"blind_set's unit embeddings")


def test_cold_table_adds_warm_up_steps_of_the_same_code_only(interrupted_run) -> None:
    import pandas as pd

    run_times = pd.DataFrame({"notebook": ["01_construction_audit", "03_ablations"], "minutes": [8.0, 30.0],
                              "code": ["abc"] * 2, "cpu": ["EPYC"] * 2, "bf16_units": [True] * 2})
    none_killed = pd.DataFrame(columns=["notebook", "code"])
    warm = pd.DataFrame({"notebook": ["01_construction_audit", "03_ablations"], "minutes": [9.8, 50.0],
                         "code": ["abc", "older"]})
    table = interrupted_run.cold_table(run_times, none_killed, warm)
    assert table.minutes.tolist() == pytest.approx([8.0 + 9.8, 30.0, 8.0 + 9.8 + 30.0])
    assert table.minutes_from_warm_up.tolist() == pytest.approx([9.8, 0.0, 9.8])
    assert table.interrupted.tolist() == [False, False, False]
    plain = interrupted_run.cold_table(run_times, none_killed)
    assert plain.minutes.tolist() == pytest.approx([8.0, 30.0, 38.0])


def test_a_start_right_after_a_restore_of_its_unfinished_execution_is_resumed(interrupted_run) -> None:
    # a part on a new machine (cold_run.sh with PARTS=1) prints the earlier parts' logs, then its
    # own start: the notebook's earlier execution never finished, its fits came with the restore
    log = LOG.replace("02_training start 2026-11-29T07:26:05Z (resumed run)\n",
                      "cold_parts restore:  (0 files, 0 ledger lines, 1 logs)\n02_training start 2026-11-29T07:26:05Z\n")
    assert interrupted_run.killed_parts(log, "02_training") == [
        (dt.datetime(2026, 11, 28, 23, 17, 29, tzinfo=dt.UTC), dt.datetime(2026, 11, 29, 0, 45, 6, tzinfo=dt.UTC))]


def test_a_restore_does_not_make_a_rerun_of_a_finished_notebook_resumed(interrupted_run) -> None:
    log = LOG.replace("02_training start 2026-11-29T07:26:05Z (resumed run)\n",
                      "cold_parts restore: 01_construction_audit (3 files, 2 ledger lines, 1 logs)\n"
                      "01_construction_audit start 2026-11-29T07:26:05Z\n")
    with pytest.raises(SystemExit, match="without a '\\(resumed run\\)' mark"):
        interrupted_run.killed_parts(log, "01_construction_audit")


def test_a_resumed_start_without_its_header_still_opens_a_part(interrupted_run) -> None:
    """A part whose header line never reached the log (its stdout went elsewhere) still shows in
    the log as a notebook start marked "(resumed run)"; one right after a header is that header's part."""
    log = ("cold run of 01_construction_audit 02_training 03_ablations at cpu on abc, data d\n"
           "01_construction_audit start 2026-11-29T07:00:00Z\n"
           "02_training start 2026-11-29T07:20:00Z\n"
           "02_training start 2026-11-29T09:00:00Z (resumed run on Xeon)\n"
           "03_ablations start 2026-11-29T10:00:00Z\n"
           "cold run resumed at cpu on abc (code abc, Xeon), data d: 03_ablations\n"
           "03_ablations start 2026-11-29T12:00:00Z (resumed run on Xeon)\n")
    assert interrupted_run.parts_of_run(log) == 3


def test_the_run_parts_are_its_script_headers_and_a_notebooks_parts_its_executions(interrupted_run) -> None:
    import pandas as pd

    log = ("cold run of 01_construction_audit 02_training at cpu on abc, data d\n" + LOG
           + "cold run resumed at cpu on abc (code abc, Xeon), data d: 02_training\n"
           + "02_training start 2026-11-29T09:00:00Z (resumed run on Xeon)\n"
           + "cold run resumed at cpu on abc (code abc, Xeon), data d: 02_training\n")
    # LOG's own "(resumed run)" start has no header before it: a part of its own
    assert interrupted_run.parts_of_run(log) == 4
    with pytest.raises(SystemExit, match="not bench/cold/cold_run.sh's log"):
        interrupted_run.parts_of_run(LOG)
    run_times = pd.DataFrame({"notebook": ["01_construction_audit", "02_training"], "minutes": [16.5, 51.2],
                              "code": ["abc"] * 2, "cpu": ["Xeon"] * 2, "bf16_units": [True] * 2})
    interrupted = pd.DataFrame({"notebook": ["02_training"], "kills": [2], "minutes_before_kill": [87.6],
                                "minutes_resumed": [51.2], "code": ["abc"]})
    table = interrupted_run.cold_table(run_times, interrupted, parts=3)
    assert table.parts.tolist() == [1, 3, 3]
    assert pd.isna(interrupted_run.cold_table(run_times, interrupted).parts.iloc[-1])
