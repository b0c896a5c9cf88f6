#!/usr/bin/env bash
# Go on with a cold run (bench/cold/cold_run.sh) after its machine was recycled: in the same clone,
# run the notebooks of the run that have no row of the clone's code in its run_times.csv, in
# order. The one that was killed midway resumes from the caches it wrote, and its start line
# in the log is marked "(resumed run on <cpu>)" so bench/cold/interrupted_run.py can add the minutes
# before each kill; the log gets the same lines bench/cold/cold_run.sh writes. Give it the same
# environment as the first part (MEMSAFE_DATA_DIR, MEMSAFE_PRIVATE_CACHE, MEMSAFE_MODEL_DIR) and
# append to the same log:
#
#   ADOPT=1 MEMSAFE_PRIVATE_CACHE=... MEMSAFE_MODEL_DIR=... bench/cold/cold_resume.sh ../cold LOG >> LOG 2>&1
#
# ADOPT=1: once every notebook has run, bring the clone's results into this checkout, add the
# minutes before each kill to the cold time table (bench/cold/interrupted_run.py), regenerate the
# step table and the report, and verify (as bench/cold/cold_run.sh does). The sampler of busy cores
# appends to the clone's artifacts/scratch/cpu_busy.txt. DRY_RUN=1: say what is left and stop.
set -euo pipefail
# The whole script is one function, read before it runs: bash reads a plain script as it goes,
# so an edit of this file (a commit, a checkout) during a run of hours would run the new text.
main() {
    repo="$(cd "$(dirname "$0")/../.." && pwd)"
    source "$repo/bench/cold/cold_lib.sh"
    clone="$(cd "${1:?usage: bench/cold/cold_resume.sh CLONE_DIR LOG}" && pwd)"
    log="$(cd "$(dirname "${2:?usage: bench/cold/cold_resume.sh CLONE_DIR LOG}")" && pwd)/$(basename "$2")"
    read -r -a notebooks <<< "$(sed -n '1s/^cold run of \(.*\) at [a-z]* on .*/\1/p' "$log")"
    scale="$(sed -n '1s/^cold run of .* at \([a-z]*\) on .*/\1/p' "$log")"
    [ "${#notebooks[@]}" -gt 0 ] || { echo "bench/cold/cold_resume.sh: $log does not start as bench/cold/cold_run.sh's log" >&2; exit 2; }
    cd "$clone"
    export MEMSAFE_DATA_DIR="${MEMSAFE_DATA_DIR:-$(cd .. && pwd)/shared/data}"
    code="$(.venv/bin/python -c 'from memsafe_lib.ledger import code_fingerprint; print(code_fingerprint()[:12])')"
    cpu="$(.venv/bin/python -c 'from memsafe_lib.ledger import cpu_model; print(cpu_model())')"
    todo=()
    for notebook in "${notebooks[@]}"; do
        if ! .venv/bin/python - "$scale" "$notebook" "$code" <<'PY'
import sys
import pandas as pd
from memsafe_lib import config
scale, notebook, code = sys.argv[1:]
path = config.scale_config(scale).recorded_dir / config.RUN_TIMES_FILE  # where --record writes it
times = pd.read_csv(path) if path.is_file() else pd.DataFrame(columns=["notebook", "code"])
sys.exit(0 if ((times.notebook == notebook) & (times.code.astype(str) == code)).any() else 1)
PY
        then todo+=("$notebook"); fi
    done
    echo "cold run resumed at $scale on $(git rev-parse --short HEAD) (code $code, $cpu), data $MEMSAFE_DATA_DIR," \
         "private cache ${MEMSAFE_PRIVATE_CACHE:-default}, models ${MEMSAFE_MODEL_DIR:-default}: ${todo[*]:-nothing left}"
    [ "${DRY_RUN:-0}" = 1 ] && exit 0
    run_cold_notebooks "$scale" "$log" "$cpu" "${todo[@]}"
    if [ "${ADOPT:-0}" = 1 ]; then
        adopt_cold_run "$repo" "$clone" "$scale" "$log" "${notebooks[@]}"
    fi
}
main "$@"; exit
