"""``memsafe score`` on many memories: memories per second and peak memory, streamed in chunks
(today's command) against the whole file in one piece (how it scored before), in one run.

    MEMSAFE_RECORD=1 .venv/bin/python bench/score_stream.py --gate-scale smoke --counts 1000 10000

Memories are real HotpotQA size-matched memories (question and units as plain JSON, no
provenance: how an agent passes them), taken in order and repeated to reach each count, each
repeat's question suffixed with its index so that no two memories share a (question, unit)
pair: the gate encodes each distinct pair once per call, so repeats would flatter the whole-
file mode, which sees them all in one call. The gate is
``memsafe train`` at the given scale (trained here if ``--gate`` is not given). Each
(mode, count) is its own ``memsafe score`` process under ``/usr/bin/time``: wall seconds and
peak resident memory (max RSS) of that process, the CPU recorded. ``whole`` sets the chunk to
the file's length, which is what the command did before it streamed; it runs only at the
counts in ``--whole-counts`` (at 10,000 memories it would need tens of GB).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd
from report import bench_parser, save_report  # bench/report.py (scripts run from bench/)

from memsafe_lib.cli import SCORE_CHUNK
from memsafe_lib.config import scale_config
from memsafe_lib.gate import train_gate
from memsafe_lib.ledger import cpu_model
from memsafe_lib.threads import configure_threads
from memsafe_lib.variants.store import build

RUN = ("import sys, memsafe_lib.cli as c; c.SCORE_CHUNK = int(sys.argv[1]); "
       "sys.exit(c.main(sys.argv[2:]))")


def write_memories(path: Path, memories: list[dict], count: int) -> Path:
    with open(path, "w", encoding="utf-8") as fh:
        for i in range(count):
            memory = memories[i % len(memories)]
            fh.write(json.dumps({**memory, "query": f"{memory['query']} [{i}]", "id": f"m{i}"}) + "\n")
    return path


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--gate-scale", default="smoke", help="the scale of the memories and of the gate trained")
    parser.add_argument("--dataset", default="hotpotqa")
    parser.add_argument("--counts", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--whole-counts", type=int, nargs="*", default=[1000])
    parser.add_argument("--chunk", type=int, default=SCORE_CHUNK, help="memories per chunk of the streamed mode")
    parser.add_argument("--seed", type=int, default=17)
    parser.add_argument("--gate", default=None, help="a saved gate directory (default: train one)")
    args = parser.parse_args()
    configure_threads()
    scale = scale_config(args.gate_scale)
    loaded, result = build(args.dataset, "size-matched", scale)
    memories = [{"query": v.question, "units": [{"title": u.title, "text": u.text} for u in v.units]}
                for v in result.variants]
    gate_dir = Path(args.gate) if args.gate else train_gate(args.dataset, scale, args.seed)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for count in args.counts:
            src = write_memories(Path(tmp) / f"memories-{count}.jsonl", memories, count)
            modes = [("streamed", args.chunk)] + ([("whole", count)] if count in args.whole_counts else [])
            for mode, chunk in modes:
                out = Path(tmp) / f"scores-{mode}-{count}.jsonl"
                command = ["/usr/bin/time", "-f", "%M %e", sys.executable, "-c", RUN, str(chunk), "score",
                           "--gate", str(gate_dir), "--input", str(src), "--out", str(out)]
                done = subprocess.run(command, capture_output=True, text=True, check=True)
                peak_kb, seconds = done.stderr.strip().splitlines()[-1].split()
                lines = sum(1 for _ in open(out, encoding="utf-8"))
                rows.append({"mode": mode, "chunk": chunk, "memories": count, "lines_out": lines,
                             "units_per_memory": round(sum(len(m["units"]) for m in memories) / len(memories), 1),
                             "seconds": float(seconds), "memories_per_s": count / float(seconds),
                             "peak_rss_mb": int(peak_kb) / 1024, "cpu": cpu_model()})
                print(rows[-1], flush=True)
    table = pd.DataFrame(rows)
    save_report("score-stream", f"score_stream_{args.dataset}", args, loaded.files,
                {"dataset": args.dataset, "gate": str(gate_dir.name), "rows": table.to_dict(orient="records")},
                table=table)


if __name__ == "__main__":
    main()
