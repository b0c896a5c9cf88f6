# Shared by bench/cold/cold_run.sh and bench/cold/cold_resume.sh; sourced, not run.

# run_cold_notebooks SCALE LOG CPU NOTEBOOK...: in the clone (the working directory), run each
# notebook with --record while bench/cold/cpu_busy.py samples the busy cores into
# artifacts/scratch/cpu_busy.txt (appending, so a resumed part adds to the first). A notebook
# whose start LOG already holds is marked "(resumed run on CPU)", which bench/cold/interrupted_run.py
# reads; with no LOG every notebook starts plainly. A file artifacts/scratch/pause in the clone
# ends the part before the next notebook (the script exits, no adoption), so that
# bench/cold/cold_parts.py can save the finished ones; bench/cold/cold_resume.sh goes on from there.
run_cold_notebooks() {
    local scale="$1" log="$2" cpu="$3" notebook sampler
    shift 3
    mkdir -p artifacts/scratch
    .venv/bin/python bench/cold/cpu_busy.py sample --out artifacts/scratch/cpu_busy.txt --every 10 &
    sampler=$!
    trap "kill $sampler 2>/dev/null || true" EXIT
    for notebook in "$@"; do
        if [ -e artifacts/scratch/pause ]; then  # `touch CLONE/artifacts/scratch/pause`: end this part here
            rm -f artifacts/scratch/pause
            date -u +"paused before $notebook %FT%TZ"
            kill "$sampler" 2>/dev/null || true
            exit 0
        fi
        if [ -n "$log" ] && grep -q "^$notebook start " "$log"; then
            date -u +"$notebook start %FT%TZ (resumed run on $cpu)"
        else
            date -u +"$notebook start %FT%TZ"
        fi
        .venv/bin/memsafe notebook "$notebook" --scale "$scale" --record
    done
    date -u +"end %FT%TZ"
    kill "$sampler" 2>/dev/null || true
}

# adopt_cold_run REPO CLONE SCALE [LOG NOTEBOOK...]: bring the clone's results into the checkout
# REPO (bench/cold/adopt_cold_run.py refuses other code), add the minutes before each kill of a
# notebook the LOG marks resumed, up to when the busy-core sampler last saw the machine
# (bench/cold/interrupted_run.py), rewrite the cold time table with the run's parts counted from
# LOG (kept with the replaced one in cold_run_history.csv), regenerate the step table and the
# report, and verify. Then `memsafe compare` the run it replaces (kept first as a worktree of
# REPO's HEAD beside REPO, previous-SCALE-run) against it (bench/compare_runs.py), and check
# every verdict of the prose against the new numbers (tests/test_report_claims.py), naming the
# sentences to reword. Nothing of it is timed.
adopt_cold_run() {
    local repo="$1" clone="$2" scale="$3" log="${4:-}" notebook previous
    shift 3
    if [ "$#" -gt 0 ]; then shift; fi
    cd "$repo"
    previous="$(cd .. && pwd)/previous-$scale-run"
    [ -e "$previous" ] || git worktree add -q --detach "$previous" HEAD
    (cd bench/cold && MEMSAFE_RECORD=1 ../../.venv/bin/python cold_run_history.py --scale "$scale" --if-present)
    .venv/bin/python bench/cold/adopt_cold_run.py "$clone" --scale "$scale"
    for notebook in "$@"; do
        if grep -q "^$notebook start .*(resumed run" "$log"; then
            (cd bench/cold && MEMSAFE_RECORD=1 ../../.venv/bin/python interrupted_run.py --log "$log" --notebook "$notebook" \
                --scale "$scale" --busy "$clone/artifacts/scratch/cpu_busy.txt")
        fi
    done
    (cd bench/cold && MEMSAFE_RECORD=1 ../../.venv/bin/python interrupted_run.py --scale "$scale" ${log:+--log "$log"})
    (cd bench/cold && MEMSAFE_RECORD=1 ../../.venv/bin/python cold_run_history.py --scale "$scale")
    (cd bench && MEMSAFE_RECORD=1 ../.venv/bin/python notebook_steps.py --scale "$scale")
    .venv/bin/memsafe report --record
    .venv/bin/memsafe verify --scale "$scale"
    (cd bench && MEMSAFE_RECORD=1 ../.venv/bin/python compare_runs.py --reference "$previous/artifacts/$scale" --scale "$scale" \
        | tail -n 3) || true
    .venv/bin/python -m pytest -q -p no:cacheprovider tests/test_report_claims.py \
        || echo "adopt_cold_run: the sentences named above no longer hold on the new run; reword them and their claims"
}
