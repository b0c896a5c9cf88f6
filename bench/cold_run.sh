#!/usr/bin/env bash
# Cold timing of some notebooks: a fresh clone of this checkout's HEAD, empty caches, then each
# notebook with `memsafe notebook NB --scale SCALE --record`, which writes its minutes to the
# clone's artifacts/<scale>/run_times.csv and ledger, with nothing else on the machine. Then
# bench/adopt_cold_run.py CLONE brings the clone's results into the checkout (it copies the
# changed artifacts/<scale>/ files, merges ledger and run_times.csv, and refuses other code).
#
#   ADOPT=1 bench/cold_run.sh ../cold 01_construction_audit 02_training 03_ablations 04_transfer \
#       05_selective 06_reader_gating 07_clinical
#
# A run that must stop between notebooks goes on in the same clone (`memsafe notebook NB
# --scale cpu --record` for the rest, in order); adopt_cold_run.py takes a clone's results
# as often as it is given them. A notebook killed midway must have the caches it wrote deleted
# before it runs again, or its minutes are not cold; or it resumes from them (start its line in
# the log with "NB start <time> (resumed run)") and bench/interrupted_run.py adds the log's
# minutes before the kill to the resumed row. Parts in separate clones also work:
#
#   ADOPT=1 bench/cold_run.sh ../cold-a 01_construction_audit 02_training 03_ablations 04_transfer 05_selective
#   ADOPT=1 WARM_GRID=1 bench/cold_run.sh ../cold-b 06_reader_gating 07_clinical
#
# WARM_GRID=1: before the timed notebooks, compute (untimed) MuSiQue's Stage A for the Stage B
# grid check, which a one-piece `make reproduce` has from notebook 02's cache; a part that
# starts after 02 would otherwise pay for it inside 07. The clone's log says when it ran.
# ADOPT=1: afterwards, bring the clone's results into this checkout (bench/adopt_cold_run.py,
# which refuses if this checkout's code changed meanwhile), regenerate the step table and the
# report, and verify; nothing of it is timed.
# Busy cores: bench/cpu_busy.py samples the machine every 10 s into the clone's
# artifacts/scratch/cpu_busy.txt while the notebooks run (a resumed part started by hand can
# start it again; it appends); `bench/cpu_busy.py summarize` splits the samples by notebook.
# Environment: SCALE (default cpu), MEMSAFE_DATA_DIR (default: ../shared/data beside the clone).
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
clone="${1:?usage: bench/cold_run.sh CLONE_DIR NOTEBOOK...}"
shift
[ "$#" -gt 0 ] || { echo "bench/cold_run.sh: name at least one notebook" >&2; exit 2; }
[ -e "$clone" ] && { echo "bench/cold_run.sh: $clone exists; a cold run needs a new clone" >&2; exit 2; }
scale="${SCALE:-cpu}"
git clone -q "$repo" "$clone"
clone="$(cd "$clone" && pwd)"
cd "$clone"
export MEMSAFE_DATA_DIR="${MEMSAFE_DATA_DIR:-$(cd .. && pwd)/shared/data}"
echo "cold run of $* at $scale on $(git rev-parse --short HEAD), data $MEMSAFE_DATA_DIR"
make install readers
if [ "${WARM_GRID:-0}" = 1 ]; then
    date -u +"untimed warm-up of the Stage B grid check's Stage A: %FT%TZ"
    MEMSAFE_RECORD=1 .venv/bin/python -c "
from memsafe_lib import config
from memsafe_lib.evaluation.neural import select_stage_b
from memsafe_lib.threads import configure_threads
configure_threads()
print(select_stage_b(config.scale_config('$scale')))"
fi
mkdir -p artifacts/scratch
.venv/bin/python bench/cpu_busy.py sample --out artifacts/scratch/cpu_busy.txt --every 10 &
sampler=$!
trap 'kill "$sampler" 2>/dev/null || true' EXIT
for notebook in "$@"; do
    date -u +"$notebook start %FT%TZ"
    .venv/bin/memsafe notebook "$notebook" --scale "$scale" --record
done
date -u +"end %FT%TZ"
kill "$sampler" 2>/dev/null || true
tail -n "$#" "artifacts/$scale/run_times.csv"
if [ "${ADOPT:-0}" = 1 ]; then
    cd "$repo"
    .venv/bin/python bench/adopt_cold_run.py "$clone" --scale "$scale"
    (cd bench && MEMSAFE_RECORD=1 ../.venv/bin/python notebook_steps.py --scale "$scale")
    .venv/bin/memsafe report --record
    .venv/bin/memsafe verify --scale "$scale"
fi
