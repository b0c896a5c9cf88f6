"""A trained MemSafe model as a self-contained, calibrated sufficiency gate for your own agent.

    gate = Gate.load("artifacts/cpu/gates/musique-seed17")
    out = gate.score("Who founded the company that makes X?", ["Title: unit text", ...])
    out.unsafe_prob, out.state_probs, out.unit_evidence, out.missing_count

``model`` holds the gate itself (load, save, score, calibrated probabilities, risk control);
``memories`` the files it reads; ``training`` how ``memsafe train`` makes one (from our QA
datasets or your records); ``card`` the card written beside it; ``evaluation`` how ``memsafe
evaluate --gate`` judges one on your labelled memories.
"""

from memsafe_lib.gate.card import render_card, write_card
from memsafe_lib.gate.memories import (
    LabelledMemories,
    MemoryScan,
    batched,
    iter_memories,
    read_labelled,
    read_memories,
    scan_memories,
)
from memsafe_lib.gate.model import (
    DEFAULT_THRESHOLD,
    FORMAT_VERSION,
    OVERSIZE_FACTOR,
    Gate,
    GateOutput,
    abstain_reason,
    has_provenance,
    memory_variant,
    oversized,
)
from memsafe_lib.gate.training import (
    GATE_PROVENANCE_DROPOUT,
    calibration_groups,
    calibration_lines,
    gate_datasets,
    metrics_lines,
    train_gate,
)

__all__ = ["DEFAULT_THRESHOLD", "FORMAT_VERSION", "GATE_PROVENANCE_DROPOUT", "OVERSIZE_FACTOR", "Gate", "GateOutput",
           "LabelledMemories", "MemoryScan", "abstain_reason", "batched", "calibration_groups", "calibration_lines",
           "gate_datasets", "has_provenance", "iter_memories", "memory_variant", "metrics_lines", "oversized",
           "read_labelled", "read_memories", "render_card", "scan_memories", "train_gate", "write_card"]
