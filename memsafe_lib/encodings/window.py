"""How a (query, unit) pair fits the encoder's token window, and how many pairs it cuts.

The paper truncates each Stage A pair to 256 tokens. A bridge pair reads (q ‖ u_top, u): two
paragraphs and a question, so it is longer than the window far more often than a plain pair.
Cutting it "longest first", as a tokenizer does by default, takes tokens from the unit being
judged as readily as from the bridge context, and the unit is what the pair is about. Here the
bridge context is cut first: the unit keeps its tokens while any bridge token is left, and only a
pair whose query and unit alone overflow loses unit tokens (then longest first, as a plain
pair does).

:func:`fit_pairs` returns the pairs with their bridge text cut to what fits (the string up to the
end of its last kept token), so every tokenizer call that follows reads them unchanged;
:func:`window_counts` says, per pair kind, how many pairs lose tokens of the unit, of the bridge,
or of anything.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from memsafe_lib.encodings.pairs import BRIDGE_SEPARATOR, Pair

TRUNCATION_RULE = "bridge-first"
"""Name of the rule, part of every encoder fingerprint (a change re-encodes every pair)."""


def _lengths(tokenizer: Any, texts: Sequence[str]) -> np.ndarray:
    if not texts:
        return np.zeros(0, dtype=int)
    ids = tokenizer(list(texts), add_special_tokens=False, truncation=False, verbose=False)["input_ids"]
    return np.array([len(x) for x in ids], dtype=int)


def _unique_lengths(tokenizer: Any, texts: Sequence[str]) -> np.ndarray:
    """Token counts of ``texts``, each distinct text tokenized once (memories repeat units)."""
    distinct = list(dict.fromkeys(texts))
    counts = dict(zip(distinct, _lengths(tokenizer, distinct).tolist(), strict=True))
    return np.array([counts[t] for t in texts], dtype=int)


def bridge_budgets(tokenizer: Any, pairs: Sequence[Pair], max_length: int) -> np.ndarray:
    """Per pair, how many bridge tokens fit beside the whole query and the whole unit (negative:
    the query and unit alone overflow); a plain pair gets a large number (nothing to cut)."""
    special = tokenizer.num_special_tokens_to_add(pair=True)
    separator = len(tokenizer(BRIDGE_SEPARATOR.strip(), add_special_tokens=False)["input_ids"])
    query = _unique_lengths(tokenizer, [p.query for p in pairs])
    unit = _unique_lengths(tokenizer, [p.unit for p in pairs])
    budget = max_length - special - separator - query - unit
    plain = np.array([p.bridge is None for p in pairs], dtype=bool)
    return np.where(plain, np.iinfo(np.int32).max, budget)


def fit_pairs(tokenizer: Any, pairs: Sequence[Pair], max_length: int) -> list[Pair]:
    """``pairs`` with each bridge text cut so that the unit keeps its tokens (see module doc).

    The cut is made at the end character of the last bridge token that fits. A tokenizer that
    would read the cut text as more tokens than that (possible for byte-pair merges) is given one
    token fewer until the pair fits, so the rule holds for any tokenizer."""
    budgets = bridge_budgets(tokenizer, pairs, max_length)
    fitted = list(pairs)
    over = [i for i, p in enumerate(pairs) if p.bridge is not None and len(p.bridge) > 0]
    if not over:
        return fitted
    distinct = list(dict.fromkeys(pairs[i].bridge for i in over))  # type: ignore[misc]
    enc = tokenizer(distinct, add_special_tokens=False, truncation=False, return_offsets_mapping=True,
                    verbose=False)
    offsets = dict(zip(distinct, enc["offset_mapping"], strict=True))
    for i in over:
        pair = pairs[i]
        bridge = pair.bridge or ""
        spans = offsets[bridge]
        keep = int(budgets[i])
        if keep >= len(spans):
            continue
        while True:
            text = bridge[:spans[keep - 1][1]] if keep > 0 else ""
            if keep <= 0 or len(tokenizer(text, add_special_tokens=False)["input_ids"]) <= keep:
                break
            keep -= 1
        fitted[i] = replace(pair, bridge=text)
    return fitted


def window_counts(tokenizer: Any, pairs: Sequence[Pair], max_length: int,
                  rule: str = TRUNCATION_RULE) -> dict[str, Any]:
    """How ``pairs`` fit a ``max_length``-token window under ``rule``: ``bridge-first`` (the
    library's) or ``longest-first`` (a tokenizer's default, for comparison).

    ``cut``: pairs longer than the window (any token lost); ``unit_cut``: pairs whose unit loses
    tokens; ``bridge_cut``: bridge pairs whose bridge context loses tokens (0 for plain pairs).
    Counted from exact tokenization, with no forward pass."""
    if rule not in (TRUNCATION_RULE, "longest-first"):
        raise ValueError(f"unknown truncation rule {rule!r}; choose {TRUNCATION_RULE!r} or 'longest-first'")
    n = len(pairs)
    if n == 0:
        return {"window": max_length, "pairs": 0, "cut": 0, "unit_cut": 0, "bridge_cut": 0,
                "share_cut": None, "share_unit_cut": None, "share_bridge_cut": None}
    special = tokenizer.num_special_tokens_to_add(pair=True)
    separator = len(tokenizer(BRIDGE_SEPARATOR.strip(), add_special_tokens=False)["input_ids"])
    query = _unique_lengths(tokenizer, [p.query for p in pairs])
    unit = _unique_lengths(tokenizer, [p.unit for p in pairs])
    is_bridge = np.array([p.bridge is not None for p in pairs], dtype=bool)
    bridge = _unique_lengths(tokenizer, [p.bridge or "" for p in pairs])
    first = query + np.where(is_bridge, separator + bridge, 0)
    total = special + first + unit
    cut = total > max_length
    if rule == TRUNCATION_RULE:  # the bridge goes first; then (query [SEP]) and unit, longest first
        bridge_cut = is_bridge & cut & (bridge > 0)
        first = query + np.where(is_bridge, separator, 0)
    else:  # longest first between the whole first text (its end is the bridge) and the unit
        bridge_cut = is_bridge & cut & (bridge > 0) & ~((unit - first) >= total - max_length)
    # the unit loses tokens unless the first text is the longer one by at least the overflow
    overflow = special + first + unit - max_length
    unit_cut = (overflow > 0) & ~((first - unit) >= overflow)
    counts = {"window": max_length, "pairs": n, "cut": int(cut.sum()), "unit_cut": int(unit_cut.sum()),
              "bridge_cut": int(bridge_cut.sum())}
    for key in ("cut", "unit_cut", "bridge_cut"):
        counts[f"share_{key}"] = counts[key] / n
    return counts
