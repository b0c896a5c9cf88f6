"""SQuAD 2.0 transfer targets are read through their own token window (issue 32, item 9).

The paper's 256-token pair encoder truncates 4.79% of SQuAD's (question, paragraph) pairs; at
the cpu scale's 128-token training window 85.6% are cut. A target from another dataset is
therefore encoded at ``NeuralBudget.transfer_max_length``, with the same fold encoders, and
the window is part of every key that holds its encodings."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from memsafe_lib.config import SCALES, NeuralBudget
from memsafe_lib.encodings import encoders as E
from memsafe_lib.encodings.stagea import StageAResult
from memsafe_lib.estimators.context import NeuralContext
from memsafe_lib.evaluation import transfer as T
from memsafe_lib.reporting import transfer as report
from memsafe_lib.variants import construction as C
from tests.test_baselines import lexical_query

TRAIN_WINDOW, TARGET_WINDOW = 24, 48
LONG_PARAGRAPH = " ".join(["the river flows north through the old town past the mill and the bridge"] * 6)


def _memory(base: str, dataset: str, texts: list[str], question: str = "where does the river flow") -> C.Variant:
    units = tuple(C.MemoryUnit(f"{base}:{i}", "River", t, i == 0, i, i) for i, t in enumerate(texts))
    return C.Variant(f"{base}:complete", base, dataset, "native", "complete", "test", 0, question, (), units, 1,
                     len(units))


@pytest.fixture(scope="module")
def encoder_config() -> E.EncoderConfig:
    return E.EncoderConfig(max_length=TRAIN_WINDOW, bf16=False, batch_size=4)


@pytest.fixture(scope="module")
def fold_encoders(encoder_config: E.EncoderConfig) -> tuple[E.CrossEncoder, E.CrossEncoder]:
    return E.CrossEncoder(encoder_config, seed=17), E.CrossEncoder(encoder_config, seed=17)


def _context(encoders: tuple[E.CrossEncoder, E.CrossEncoder], config: E.EncoderConfig,
             transfer_max_length: int | None) -> NeuralContext:
    smoke = SCALES["smoke"]
    budget = replace(smoke.neural, encoder_seeds=(17,), max_length=TRAIN_WINDOW,
                     transfer_max_length=transfer_max_length)
    stage_a = StageAResult({}, encoders, E.BiEncoder(config), E.EncodeStats(), (0, 0))
    return NeuralContext("lexical", replace(smoke, neural=budget), {17: stage_a})


def test_budget_window_defaults_to_the_training_window() -> None:
    assert NeuralBudget().transfer_window == NeuralBudget().max_length == 256  # the paper: one cap for both
    assert NeuralBudget(max_length=128, transfer_max_length=320).transfer_window == 320
    assert SCALES["paper"].neural.transfer_window == 256
    assert SCALES["cpu"].neural.transfer_window > SCALES["cpu"].neural.max_length


def test_squad_pairs_are_encoded_at_the_transfer_window_family_b_at_the_training_one(
        fold_encoders: tuple[E.CrossEncoder, E.CrossEncoder], encoder_config: E.EncoderConfig,
        monkeypatch: pytest.MonkeyPatch) -> None:
    source = C.build_size_matched([lexical_query(i) for i in range(40)])
    squad = [_memory(f"sq{i}", "squad2", [LONG_PARAGRAPH + f" {i}"]) for i in range(2)]
    family_b = [_memory(f"fb{i}", source.dataset, [LONG_PARAGRAPH, "a short unit"], question="which mill")
                for i in range(2)]
    context = _context(fold_encoders, encoder_config, TARGET_WINDOW)
    seen: list[tuple[str, int, int]] = []
    tokenize = E.CrossEncoder.tokenize

    def recording(self: E.CrossEncoder, pairs: list[E.Pair]) -> dict:
        batch = tokenize(self, pairs)
        seen.extend((p.query, self.config.max_length, batch["input_ids"].shape[1]) for p in pairs)
        return batch

    monkeypatch.setattr(E.CrossEncoder, "tokenize", recording)
    T.transfer(source, {"squad2": squad, "family-b": family_b}, ["text_length"], [17], context)
    # Every SQuAD pair (plain and bridge, both folds) is read at 48 tokens, and fills them.
    assert {(w, n) for q, w, n in seen if q == squad[0].question} == {(TARGET_WINDOW, TARGET_WINDOW)}
    assert fold_encoders[0].config.max_length == TRAIN_WINDOW  # the trained encoders are not changed

    # The stored SQuAD encoding is the fold encoders' reading at 48 tokens, computed independently.
    wide = E.CrossEncoder(replace(encoder_config, max_length=TARGET_WINDOW), seed=17)
    reps, logits = E.encode_pairs(wide, [E.Pair(squad[0].question, E.unit_string("River", squad[0].units[0].text))],
                                  progress=False)
    stored = context.stage_a[17].encodings[squad[0].variant_id]
    np.testing.assert_allclose(stored.plain, reps, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(stored.plain_logit, logits, rtol=1e-5, atol=1e-5)
    narrow = E.encode_pairs(fold_encoders[0], [E.Pair(squad[0].question, E.unit_string("River", LONG_PARAGRAPH))],
                            progress=False)[0]
    assert not np.allclose(stored.plain, narrow, atol=1e-3)

    # Family B is the source dataset's own paragraphs: read as its test split was, at 24 tokens.
    assert {(w, n) for q, w, n in seen if q == family_b[0].question} == {(TRAIN_WINDOW, TRAIN_WINDOW)}


def test_encoding_caches_keep_two_windows_apart(fold_encoders: tuple[E.CrossEncoder, E.CrossEncoder],
                                                encoder_config: E.EncoderConfig, tmp_path: Path) -> None:
    narrow = fold_encoders[0]
    wide = narrow.at_window(TARGET_WINDOW)
    assert wide.config.max_length == TARGET_WINDOW and narrow.config.max_length == TRAIN_WINDOW
    assert wide.fingerprint() != narrow.fingerprint()
    with pytest.raises(ValueError, match="position"):
        narrow.at_window(513)  # MiniLM reads at most 512 positions
    cache = E.EncodingCache(tmp_path / "enc.sqlite")
    pairs = [E.Pair("where does the river flow", LONG_PARAGRAPH)]
    E.encode_pairs(narrow, pairs, cache, progress=False)
    stats = E.EncodeStats()
    E.encode_pairs(wide, pairs, cache, progress=False, stats=stats)
    assert stats.from_cache == 0 and stats.encoded == 1 and len(cache) == 2

    bi = E.BiEncoder(encoder_config)
    short_view = bi.embed([LONG_PARAGRAPH])[0]
    wide_bi = bi.at_window(TARGET_WINDOW)
    assert not np.allclose(wide_bi.embed([LONG_PARAGRAPH])[0], short_view, atol=1e-4)  # not the 24-token memo
    np.testing.assert_array_equal(bi.embed([LONG_PARAGRAPH])[0], short_view)


def test_transfer_cache_key_holds_the_target_windows() -> None:
    from tests.test_setmodel import _variants_and_encodings

    _, enc = _variants_and_encodings(4)
    stage_a = StageAResult(dict(enc), (), None, E.EncodeStats(), (0, 0))  # type: ignore[arg-type]
    scale = replace(SCALES["smoke"], neural=replace(SCALES["smoke"].neural, encoder_seeds=(17,)))
    context = NeuralContext("synthetic", scale, {17: stage_a}, {"width": 16, "heads": 2, "epochs": 2})
    at_256 = T._cache_key("base", "memsafe", 17, context, {"squad2": 256})
    at_320 = T._cache_key("base", "memsafe", 17, context, {"squad2": 320})
    assert at_256 != at_320
    # A model that reads no Stage A keeps one key whatever the window.
    assert T._cache_key("base", "tfidf", 17, context, {"squad2": 256}) == T._cache_key("base", "tfidf", 17, context,
                                                                                          {"squad2": 320})


def test_truncation_share_matches_a_hand_count() -> None:
    """BERT-uncased pieces: "what is it" is 3 tokens, each "the" one; a pair adds [CLS] [SEP] [SEP]
    and a bridge pair the [SEP] between question and u_top."""
    tokenizer = E.CrossEncoder(E.EncoderConfig(bf16=False)).tokenizer
    sizes = [9, 10, 11, 40]  # pair lengths 3 + n + 3: 15, 16, 17, 46
    pairs = [E.Pair("what is it", " ".join(["the"] * n)) for n in sizes]
    got = T.truncation(tokenizer, pairs, 16)
    assert got == {"window": 16, "pairs": 4, "truncated": 2, "share": 0.5}  # 17 and 46 exceed 16; 16 fits
    bridge = [replace(p, bridge=p.unit) for p in pairs]  # 3 + 1 + 2n + 3: 25, 27, 29, 87
    assert T.truncation(tokenizer, bridge, 27) == {"window": 27, "pairs": 4, "truncated": 2, "share": 0.5}
    assert T.truncation(tokenizer, [], 16)["share"] is None

    squad = [_memory(f"s{i}", "squad2", [" ".join(["the"] * n)], question="what is it") for i, n in enumerate(sizes)]
    encodings = {v.variant_id: E.VariantEncoding(v.variant_id, np.zeros((1, 1)), np.zeros((1, 1)), np.zeros(1),
                                                 np.zeros(1), 0) for v in squad}
    table = report.squad_truncation_table(tokenizer, squad, encodings, window=20)
    # unit_string adds "River: " (2 tokens): plain 17..48, bridge (q [SEP] u, u) 4 + 2(n + 2) + 3 = 29..91.
    plain = table[(table.pair == "plain") & (table.window == 20)].iloc[0]
    assert (plain.pairs, plain.truncated, plain.share) == (4, 1, 0.25)
    assert (plain.paper_window, plain.paper_share) == (256, 0.0479)
    bridge_row = table[table.pair == "bridge"].iloc[0]
    assert (bridge_row.window, bridge_row.truncated, bridge_row.share) == (20, 4, 1.0)
    assert np.isnan(bridge_row.paper_share)  # the paper's 4.79% concerns plain pairs
    at_paper = table[(table.pair == "plain") & (table.window == 256)].iloc[0]
    assert at_paper.truncated == 0
    assert list(table.columns[:6]) == ["pair", "window", "pairs", "truncated", "share", "paper_window"]
