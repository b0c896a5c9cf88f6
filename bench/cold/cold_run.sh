#!/usr/bin/env bash
# Cold timing of some notebooks: a fresh clone of this checkout's HEAD, empty caches, then each
# notebook with `memsafe notebook NB --scale SCALE --record`, which writes its minutes to the
# clone's artifacts/<scale>/run_times.csv and ledger, with nothing else on the machine. Then
# bench/cold/adopt_cold_run.py CLONE brings the clone's results into the checkout (it copies the
# changed artifacts/<scale>/ files, merges ledger and run_times.csv, and refuses other code).
#
#   ADOPT=1 bench/cold/cold_run.sh ../cold 01_construction_audit 02_training 03_ablations 04_transfer \
#       05_selective 06_reader_gating 07_clinical
#
# A run that must stop, between notebooks or inside one, goes on in the same clone with
# bench/cold/cold_resume.sh CLONE LOG: the notebook killed midway resumes from the caches it wrote and
# bench/cold/interrupted_run.py adds the log's minutes before each kill to its row. adopt_cold_run.py
# takes a clone's results as often as it is given them. Parts in separate clones also work:
#
#   ADOPT=1 bench/cold/cold_run.sh ../cold-a 01_construction_audit 02_training 03_ablations 04_transfer 05_selective
#   ADOPT=1 WARM_GRID=1 bench/cold/cold_run.sh ../cold-b 06_reader_gating 07_clinical
#
# WARM_GRID=1: before the timed notebooks, compute (untimed) MuSiQue's Stage A for the Stage B
# grid check, which a one-piece `make reproduce` has from notebook 02's cache; a part that
# starts after 02 would otherwise pay for it inside 07. The clone's log says when it ran.
# WARM_STAGE_A=1: the same for every multi-hop dataset's size-matched Stage A at every encoder
# seed (notebook 02's pooled fold encoders and their encodings), which notebook 03's full model
# reads from 02's cache in a one-piece run; for a part that starts with 03 in a new clone.
# Either one ranks units with the pretrained encoder's unit embeddings, which notebook 01 computes
# in a one-piece run: in a part that also runs 01, 01 then reads them cached, and
# `interrupted_run.py --warm-up-step 01_construction_audit=REGEX` gives their minutes back to 01's row.
# WARM_EMBEDDINGS=1: the same for the pretrained encoder's unit embeddings of the size- and
# blind-matched constructions, which notebook 01 computes (about 11 min) and 02's Stage A ranker
# and blind_set read from one shared cache; for a part that starts with 02 in a new clone.
# PARTS=1: before the notebooks, write the finished notebooks of earlier machines that
# bench/cold/cold_parts.py saved into the checkout (bench/cold/parts/<scale>/, committed) into the
# clone, and their logs into this log, so this part joins them and ADOPT=1 takes every part.
# ADOPT=1: afterwards, bring the clone's results into this checkout (bench/cold/adopt_cold_run.py,
# which refuses if this checkout's code changed meanwhile), regenerate the step table and the
# report, and verify; nothing of it is timed.
# Busy cores: bench/cold/cpu_busy.py samples the machine every 10 s into the clone's
# artifacts/scratch/cpu_busy.txt while the notebooks run (a resumed part started by hand can
# start it again; it appends); `bench/cold/cpu_busy.py summarize` splits the samples by notebook.
# Environment: SCALE (default cpu), MEMSAFE_DATA_DIR (default: ../shared/data beside the clone).
set -euo pipefail
# The whole script is one function, read before it runs: bash reads a plain script as it goes,
# so an edit of this file (a commit, a checkout) during a run of hours would run the new text.
main() {
    repo="$(cd "$(dirname "$0")/../.." && pwd)"
    source "$repo/bench/cold/cold_lib.sh"
    clone="${1:?usage: bench/cold/cold_run.sh CLONE_DIR NOTEBOOK...}"
    shift
    [ "$#" -gt 0 ] || { echo "bench/cold/cold_run.sh: name at least one notebook" >&2; exit 2; }
    [ -e "$clone" ] && { echo "bench/cold/cold_run.sh: $clone exists; a cold run needs a new clone" >&2; exit 2; }
    scale="${SCALE:-cpu}"
    git clone -q "$repo" "$clone"
    clone="$(cd "$clone" && pwd)"
    cd "$clone"
    export MEMSAFE_DATA_DIR="${MEMSAFE_DATA_DIR:-$(cd .. && pwd)/shared/data}"
    echo "cold run of $* at $scale on $(git rev-parse --short HEAD), data $MEMSAFE_DATA_DIR"
    make install readers
    # warm_up WHAT BODY: untimed, logged between two stamps; BODY runs after the shared prelude
    # (threads set, `config` imported, `scale` the run's ScaleConfig)
    warm_up() {
        date -u +"untimed warm-up of $1: %FT%TZ"
        MEMSAFE_RECORD=1 .venv/bin/python -c "
from memsafe_lib import config
from memsafe_lib.threads import configure_threads
configure_threads()
scale = config.scale_config('$scale')
$2"
        date -u +"warm-up done: %FT%TZ"
    }
    if [ "${WARM_GRID:-0}" = 1 ]; then
        warm_up "the Stage B grid check's Stage A" "
from memsafe_lib.estimators.neural_context import select_stage_b
print(select_stage_b(scale))"
    fi
    if [ "${WARM_EMBEDDINGS:-0}" = 1 ]; then
        warm_up "notebook 01's unit embeddings" "
from memsafe_lib.estimators.blind import blind_set_config, embed_units
from memsafe_lib.estimators.context import pretrained_embeddings
from memsafe_lib.variants.store import build
for dataset in config.FAMILY_A_DATASETS:
    variants = [v for c in ('size-matched', 'blind-matched') for v in build(dataset, c, scale)[1].variants]
    embed_units(variants, pretrained_embeddings(scale, dataset), blind_set_config(scale))"
    fi
    if [ "${WARM_STAGE_A:-0}" = 1 ]; then
        warm_up "notebook 02's size-matched Stage A" "
from memsafe_lib.estimators.neural_context import stage_a_for
from memsafe_lib.variants.store import build
for dataset in config.FAMILY_A_DATASETS:
    for seed in scale.neural.encoder_seeds:
        stage_a_for(build(dataset, 'size-matched', scale)[1], scale, seed)"
    fi
    local restored="" cpu=""
    if [ "${PARTS:-0}" = 1 ]; then
        # the earlier parts' logs, also kept in the clone, so that a notebook saved midway and
        # started here again is marked "(resumed run on CPU)" (run_cold_notebooks)
        mkdir -p artifacts/scratch
        .venv/bin/python bench/cold/cold_parts.py restore "$clone" --scale "$scale" \
            | tee artifacts/scratch/restored_parts.log
        restored=artifacts/scratch/restored_parts.log
        cpu="$(.venv/bin/python -c 'from memsafe_lib.ledger import cpu_model; print(cpu_model())')"
    fi
    run_cold_notebooks "$scale" "$restored" "$cpu" "$@"
    tail -n "$#" "artifacts/$scale/run_times.csv"
    if [ "${ADOPT:-0}" = 1 ]; then
        adopt_cold_run "$repo" "$clone" "$scale"
    fi
}
main "$@"; exit
