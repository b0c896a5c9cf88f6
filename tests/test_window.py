"""The Stage A window: a bridge pair's context is cut before its unit, and the shares of pairs
cut are counted as the encoder reads them. Hand-built texts of words that are one WordPiece
token each (checked first), so every count here is a hand calculation."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from transformers import AutoTokenizer

from memsafe_lib.encodings import encoders as E
from memsafe_lib.encodings.pairs import Pair
from memsafe_lib.encodings.window import fit_pairs, window_counts

QUERY = "where is the river"  # 4 words
UNIT = "the river is in the town near the hills and the old road to it"  # 15 words
BRIDGE = "the town is on the map of the old country"  # 10 words
SPECIAL = 3  # [CLS] first [SEP] unit [SEP]
SEPARATOR = 1  # the [SEP] between the query and the bridge


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    return AutoTokenizer.from_pretrained(E.resolve_model(E.PACKAGED_MINILM))


def _words(text: str) -> int:
    return len(text.split())


def test_every_hand_built_word_is_one_token(tokenizer: Any) -> None:
    for text in (QUERY, UNIT, BRIDGE):
        assert len(tokenizer(text, add_special_tokens=False)["input_ids"]) == _words(text)


def _read(tokenizer: Any, pair: Pair, window: int) -> tuple[list[str], list[str]]:
    """The first text's and the unit's tokens as a cross-encoder of ``window`` tokens reads them."""
    reader = SimpleNamespace(tokenizer=tokenizer, config=E.EncoderConfig(max_length=window))  # no weights needed
    ids = E.CrossEncoder.tokenize(reader, [pair])["input_ids"][0].tolist()  # type: ignore[arg-type]
    tokens = tokenizer.convert_ids_to_tokens(ids)
    seps = [i for i, t in enumerate(tokens) if t == "[SEP]"]
    end = seps[1] if pair.bridge is not None else seps[0]  # [CLS] q [SEP] bridge [SEP] unit [SEP]
    return tokens[1:end], tokens[end + 1:-1]


def test_a_bridge_pair_keeps_its_whole_unit_while_bridge_tokens_are_left(tokenizer: Any) -> None:
    window = 26  # the whole pair needs 3 + 4 + 1 + 10 + 15 = 33
    pair = Pair(QUERY, UNIT, bridge=BRIDGE)
    keep = window - SPECIAL - _words(QUERY) - SEPARATOR - _words(UNIT)  # 3 bridge words fit
    fitted = fit_pairs(tokenizer, [pair], window)[0]
    assert fitted.bridge == " ".join(BRIDGE.split()[:keep])
    first, unit = _read(tokenizer, pair, window)
    assert unit == UNIT.split()  # longest first would cut the unit too (15 and 15 tokens, 7 over)
    assert first == QUERY.split() + ["[SEP]"] + BRIDGE.split()[:keep]


def test_when_query_and_unit_alone_overflow_the_bridge_is_gone_and_the_unit_is_cut(tokenizer: Any) -> None:
    window = 20  # query + separator + unit + special = 23
    pair = Pair(QUERY, UNIT, bridge=BRIDGE)
    assert fit_pairs(tokenizer, [pair], window)[0].bridge == ""
    first, unit = _read(tokenizer, pair, window)
    assert first == QUERY.split() + ["[SEP]"]
    assert unit == UNIT.split()[:window - SPECIAL - _words(QUERY) - SEPARATOR]  # 12 of 15 words


def test_plain_pairs_and_pairs_that_fit_are_unchanged(tokenizer: Any) -> None:
    pairs = [Pair(QUERY, UNIT), Pair(QUERY, UNIT, bridge=BRIDGE)]
    assert fit_pairs(tokenizer, pairs, 33) == pairs
    assert fit_pairs(tokenizer, pairs[:1], 10) == pairs[:1]


def test_window_counts_match_a_hand_count(tokenizer: Any) -> None:
    short_unit = "the river"  # 2 words
    pairs = [Pair(QUERY, UNIT),  # 22 tokens
             Pair(QUERY, short_unit),  # 9
             Pair(QUERY, UNIT, bridge=BRIDGE),  # 33; without the bridge 23
             Pair(QUERY, short_unit, bridge=BRIDGE)]  # 20; without the bridge 10
    counts = window_counts(tokenizer, pairs, 15)
    # cut: pairs over 15 tokens: 22, 33, 20 -> 3; bridge cut: both bridge pairs; unit cut: the
    # plain 22 (its unit longer than the query) and the bridge pair whose core is 23
    assert (counts["cut"], counts["bridge_cut"], counts["unit_cut"]) == (3, 2, 2)
    assert counts["share_cut"] == pytest.approx(3 / 4)
    at_window = window_counts(tokenizer, pairs, 23)
    assert (at_window["cut"], at_window["bridge_cut"], at_window["unit_cut"]) == (1, 1, 0)
    assert window_counts(tokenizer, pairs, 33)["cut"] == 0


def test_a_long_query_absorbs_the_overflow_before_the_unit(tokenizer: Any) -> None:
    long_query = " ".join(["where is the river"] * 4)  # 16 words
    short_unit = "the river"  # 2 words: 3 + 16 + 2 = 21 tokens
    counts = window_counts(tokenizer, [Pair(long_query, short_unit)], 18)
    assert (counts["cut"], counts["unit_cut"]) == (1, 0)  # longest first cuts the query's 3 tokens


def test_longest_first_counts_for_comparison_cut_the_unit_of_a_bridge_pair(tokenizer: Any) -> None:
    pairs = [Pair(QUERY, UNIT, bridge=BRIDGE)]  # first text 15 tokens, unit 15, 33 in all
    ours = window_counts(tokenizer, pairs, 26)
    longest = window_counts(tokenizer, pairs, 26, rule="longest-first")
    assert (ours["unit_cut"], ours["bridge_cut"]) == (0, 1)
    assert (longest["unit_cut"], longest["bridge_cut"]) == (1, 1)  # 7 over, split between the two
    # a unit longer than the first text by the whole overflow takes all of it
    long_unit = " ".join([UNIT] * 2)  # 30 tokens: 3 + 15 + 30 = 48, 8 over a 40-token window
    assert window_counts(tokenizer, [Pair(QUERY, long_unit, bridge=BRIDGE)], 40, rule="longest-first")["bridge_cut"] == 0
    with pytest.raises(ValueError, match="unknown truncation rule"):
        window_counts(tokenizer, pairs, 26, rule="middle-out")
