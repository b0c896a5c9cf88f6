"""Write .gpu/data: the raw records that `memsafe train --scale smoke` reads of each multi-hop QA
dataset (smoke pools Stage A over musique, hotpotqa and 2wikimultihopqa, so a hotpotqa gate
reads all three), in the same folder layout, file names and formats as MEMSAFE_DATA_DIR.

Kept: every raw record behind a base question the smoke cap keeps (the first 60 base ids in
salted-hash order, MuSiQue twins together). The cap keeps the same ids from the slice (they
are the first 60 of the slice too), so construction from the slice equals construction from
the full folder; this script checks that, variant by variant.

    MEMSAFE_DATA_DIR=../shared/data .venv/bin/python bench/gpu/make_data_slice.py [.gpu/data]
"""

import gzip
import json
import shutil
import sys
from pathlib import Path

from memsafe_lib import config
from memsafe_lib.data.loader import dataset_spec, load_dataset
from memsafe_lib.io import sha256_file
from memsafe_lib.variants.construction import construct, default_construction

SCALE = config.scale_config("smoke")
src = config.data_dir()
dst = Path(sys.argv[1] if len(sys.argv) > 1 else ".gpu/data").resolve()
if dst.exists():
    shutil.rmtree(dst)


def write_records(path: Path, records: list, jsonl: bool) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records) if jsonl else \
        json.dumps(records, ensure_ascii=False)
    data = text.encode()
    if path.name.endswith(".gz"):
        data = gzip.compress(data, mtime=0)
    path.write_bytes(data)


def signature(result) -> list:
    return sorted(result.variants, key=lambda v: v.variant_id)  # every field (no file provenance in a Variant)


provenance = []
for name in config.FAMILY_A_DATASETS:
    spec = dataset_spec(name)
    full = load_dataset(name, src, max_base_queries=SCALE.base_query_cap(name))
    keep: dict[str, set[int]] = {}
    for q in full.queries:
        keep.setdefault(q.provenance.file, set()).add(q.provenance.record_index)
    for rel, indices in keep.items():
        path = src / rel
        records = [raw for _, index, raw in spec.iter_records(path) if index in indices]
        assert len(records) == len(indices), (rel, len(records), len(indices))
        out = dst / rel
        write_records(out, records, jsonl=".jsonl" in path.name)
        provenance.append({"file": rel, "source_sha256": sha256_file(path), "records_kept": len(records),
                           "source_record_indices": sorted(indices), "bytes": out.stat().st_size})
    sliced = load_dataset(name, dst, max_base_queries=SCALE.base_query_cap(name))
    same = signature(construct(full, default_construction(name))) == signature(construct(sliced,
                                                                                          default_construction(name)))
    ids = sorted({q.id for q in full.queries})
    assert ids == sorted({q.id for q in sliced.queries}), name
    assert same, f"{name}: construction from the slice differs"
    print(f"{name}: {len(ids)} base ids, {len(full.queries)} records kept; size-matched construction identical")

(dst / "slice.json").write_text(json.dumps({"made_by": "bench/gpu/make_data_slice.py", "source": str(src),
                                            "scale": SCALE.name, "files": provenance}, indent=1) + "\n")
(dst / "PROVENANCE.md").write_text(
    "# .gpu/data: smoke-scale slice of shared/data\n\n"
    "Real records, unchanged, from the subset files of shared/data (see its PROVENANCE.md and manifest.json\n"
    "for sources and licences: MuSiQue CC BY 4.0, HotpotQA CC BY-SA 4.0, 2WikiMultiHopQA Apache-2.0 per the\n"
    "brief). Only the records behind the base questions `--scale smoke` keeps (60 per dataset) are copied,\n"
    "under the same relative paths; `slice.json` lists each file's source sha256 and the kept record indices.\n"
    "Not an evaluation split; for the GPU smoke check only (bench/gpu/check.sh).\n")
total = sum(p.stat().st_size for p in dst.rglob("*") if p.is_file())
print(f"{dst}: {total / 2**20:.2f} MiB")
