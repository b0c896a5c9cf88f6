"""A GGUF model read by transformers: the three ways of loading it, side by side in one run.

``gguf``: straight from the GGUF file (dequantized in Python at every load). ``converted``:
the folder ``estimators/llm.converted_gguf`` wrote before, dequantized tensors with the file's
``quantization_config`` kept, which makes transformers load them behind its GGUF quantizer.
``plain``: the folder it writes now, without that entry. Per way: load seconds, prefill
tokens/s on ``--prompt-tokens`` random token ids and one-token decode steps/s with the cache
(all three models loaded first, then measured forward and back, means reported), and the
largest logit difference from the ``gguf`` load.

    MEMSAFE_RECORD=1 .venv/bin/python bench/gguf_plain.py --model qwen2.5-coder-1.5b-instruct-q4_k_m
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import pandas as pd
import torch
from report import save_report  # bench/report.py (scripts run from bench/)

from memsafe_lib.estimators.llm import converted_gguf, packaged_gguf
from memsafe_lib.ledger import environment
from memsafe_lib.precision import use_bf16
from memsafe_lib.threads import configure_threads

LOADS = ("gguf", "converted", "plain")


def with_quantization_config(plain: Path, gguf_name: str, folder: Path) -> Path:
    """The plain folder's files (linked) with the config the earlier conversion wrote."""
    for item in plain.iterdir():
        if item.name != "config.json":
            (folder / item.name).symlink_to(item)
    settings = json.loads((plain / "config.json").read_text())
    settings["quantization_config"] = {"dequantize": False, "gguf_file": gguf_name, "quant_method": "gguf"}
    (folder / "config.json").write_text(json.dumps(settings))
    return folder


def rates(model: torch.nn.Module, ids: torch.Tensor, steps: int) -> tuple[float, float, torch.Tensor]:
    """Prefill tokens/s, decode steps/s and the last position's logits."""
    from transformers import DynamicCache  # lazy: heavy

    with torch.no_grad():
        model(input_ids=ids[:, :8])  # warm-up
        cache = DynamicCache()
        start = time.perf_counter()
        logits = model(input_ids=ids, past_key_values=cache, use_cache=True, logits_to_keep=1).logits
        prefill = ids.shape[1] / (time.perf_counter() - start)
        token = logits[:, -1:].argmax(-1)
        start = time.perf_counter()
        for _ in range(steps):
            token = model(input_ids=token, past_key_values=cache, use_cache=True).logits[:, -1:].argmax(-1)
        decode = steps / (time.perf_counter() - start)
    return prefill, decode, logits[0, -1].float()


def main() -> None:
    from transformers import AutoModelForCausalLM  # lazy: heavy

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", default="cpu")
    parser.add_argument("--model", default="qwen2.5-coder-1.5b-instruct-q4_k_m")
    parser.add_argument("--prompt-tokens", type=int, default=2048)
    parser.add_argument("--decode-steps", type=int, default=16)
    args = parser.parse_args()
    threads = configure_threads()
    dtype = torch.bfloat16 if use_bf16(True, "cpu") else torch.float32
    gguf = packaged_gguf(args.model)
    plain = converted_gguf(str(gguf), dtype)
    ids = torch.randint(1000, 30000, (1, args.prompt_tokens), generator=torch.Generator().manual_seed(0))
    rows, reference = [], None
    converted = with_quantization_config(plain, gguf.name, Path(tempfile.mkdtemp()))
    models = {}
    for label in LOADS:
        start = time.perf_counter()
        where = {"gguf": gguf.parent, "converted": converted, "plain": plain}[label]
        extra = {"gguf_file": gguf.name} if label == "gguf" else {}
        models[label] = AutoModelForCausalLM.from_pretrained(where, dtype=dtype, **extra).eval()
        models[label].load_s = time.perf_counter() - start
    rows, reference = [], None
    for round_, order in enumerate((LOADS, LOADS[::-1])):  # forward then back: order effects cancel
        for label in order:
            prefill, decode, logits = rates(models[label], ids, args.decode_steps)
            reference = logits if reference is None else reference
            rows.append({"round": round_ + 1, "load": label,
                         "quantizer": type(getattr(models[label], "hf_quantizer", None)).__name__,
                         "load_s": round(models[label].load_s, 1), "prefill_tok_s": prefill,
                         "decode_steps_s": decode, "max_logit_diff": float((logits - reference).abs().max())})
            print(rows[-1], flush=True)
    table = pd.DataFrame(rows)
    by = table.groupby("load")[["prefill_tok_s", "decode_steps_s"]].mean()
    report = {"model": args.model, "dtype": str(dtype), "torch_threads": threads[1], "cpu": environment()["cpu"],
              "prompt_tokens": args.prompt_tokens, "decode_steps": args.decode_steps,
              "prefill_speedup_over_converted": float(by.prefill_tok_s["plain"] / by.prefill_tok_s["converted"]),
              "decode_speedup_over_converted": float(by.decode_steps_s["plain"] / by.decode_steps_s["converted"]),
              "max_logit_diff": float(table.max_logit_diff.max())}
    name = args.model.split("-instruct")[0].replace(".", "_")
    save_report("gguf-plain", f"gguf_plain_{name}", args, [], report, table=table)


if __name__ == "__main__":
    main()
