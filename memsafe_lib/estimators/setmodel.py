"""Stage B: the set integrity model, and its mean-pooling comparator.

Each memory is a padded set of unit tokens. A unit token concatenates the Stage A outputs
(both encodings and both relevance logits) with LexSet's lexical, position and rank
features; a learned query token carries record-level provenance (memory size, compression
ratio, positions in the source context). Two transformer encoder layers with a padding
mask let units attend to one another and to the query token. The query token feeds the
unsafe, state and missing-count heads; every unit token feeds the per-unit evidence head.

``attention=False`` gives the matched comparator: the same input projection and heads, the
same depth of position-wise feed-forward blocks, but units never see each other; the set is
summarised by a masked mean.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch
from torch import nn

from memsafe_lib.config import STAGE_B_THREADS, NeuralBudget
from memsafe_lib.maskdropout import MaskDropout, dropout_module
from memsafe_lib.measures.metrics import macro_f1, unsafe_auroc
from memsafe_lib.precision import use_bf16
from memsafe_lib.threads import torch_threads_held
from memsafe_lib.variants.construction import STATES, present_states


@dataclass(frozen=True)
class SetModelConfig:
    width: int = 128
    layers: int = 2
    heads: int = 4
    dropout: float = 0.1
    lr: float = 3e-4
    weight_decay: float = 0.01
    epochs: int = 30
    batch_size: int = 32
    attention: bool = True
    """False: the mean-pooling comparator."""
    use_lexical: bool = True
    """Include LexSet's unit features in the unit tokens (an ablation switches them off)."""
    localization_heads: bool = True
    """Train the per-unit evidence and missing-count heads (an ablation switches them off)."""
    bf16: bool = False
    """Forward and backward passes under bf16 autocast (weights, optimiser state and losses stay
    fp32): much faster where the CPU has bf16 matrix units
    (``artifacts/cpu/bench/stage_b_precision_musique.csv``)."""
    mask_dropout: bool = True
    """Dropout masks from :mod:`memsafe_lib.maskdropout` rather than torch's per-element
    Bernoulli draws: about twice as fast a dropout on CPU, the same rate to within 1/65,536
    (``artifacts/cpu/bench/stage_b_dropout_musique.csv``); False gives ``nn.Dropout``."""
    patience: int | None = None
    """Stop after this many epochs without a better validation score (None: all ``epochs``).
    The kept epoch is the best of those run, so a patience that outlasts every plateau keeps
    the full run's choice (``artifacts/cpu/bench/stage_b_patience.csv``)."""

    @classmethod
    def for_budget(cls, budget: NeuralBudget, **overrides: Any) -> SetModelConfig:
        """The scale's training budget (epochs, precision, patience) with ``overrides``."""
        return replace(cls(epochs=budget.stage_b_epochs, bf16=budget.stage_b_bf16, patience=budget.stage_b_patience),
                       **overrides)


GRID: tuple[dict[str, Any], ...] = tuple(
    {"width": w, "dropout": d, "lr": lr} for w in (128, 256) for d in (0.1, 0.2) for lr in (3e-4, 1e-3))
"""The eight-point Stage B grid (width x dropout x learning rate); the paper's selected point,
(128, 0.1, 3e-4), comes first so a one-point run uses it."""


@dataclass
class SetBatch:
    """Padded tensors of a batch of memories."""

    units: torch.Tensor  # (b, n, d_unit)
    mask: torch.Tensor  # (b, n) True where a unit exists
    provenance: torch.Tensor  # (b, d_prov)
    unsafe: torch.Tensor | None = None  # (b,)
    state: torch.Tensor | None = None  # (b,)
    evidence: torch.Tensor | None = None  # (b, n)
    missing: torch.Tensor | None = None  # (b,)

    def to(self, device: torch.device | str) -> SetBatch:
        """The same batch on ``device`` (the model's)."""
        moved = {k: None if v is None else v.to(device) for k, v in vars(self).items()}
        return SetBatch(**moved)


def collate(units: Sequence[np.ndarray], provenance: np.ndarray, targets: dict[str, Any] | None = None) -> SetBatch:
    n = max(len(u) for u in units)
    d = units[0].shape[1]
    x = np.zeros((len(units), n, d), np.float32)
    mask = np.zeros((len(units), n), bool)
    for i, u in enumerate(units):
        x[i, :len(u)] = u
        mask[i, :len(u)] = True
    batch = SetBatch(torch.from_numpy(x), torch.from_numpy(mask), torch.from_numpy(provenance.astype(np.float32)))
    if targets is not None:
        ev = np.zeros((len(units), n), np.float32)
        for i, e in enumerate(targets["evidence"]):
            ev[i, :len(e)] = e
        batch.unsafe = torch.tensor(targets["unsafe"], dtype=torch.float32)
        batch.state = torch.tensor(targets["state"], dtype=torch.long)
        batch.evidence = torch.from_numpy(ev)
        batch.missing = torch.tensor(targets["missing"], dtype=torch.float32)
    return batch


class _FeedForward(nn.Module):
    """Position-wise block of a transformer layer without the attention (pre-norm, residual)."""

    def __init__(self, width: int, dropout: float, mask_dropout: bool = True) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.ff = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), dropout_module(dropout, mask_dropout),
                                nn.Linear(4 * width, width), dropout_module(dropout, mask_dropout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.ff(self.norm(x))


class SetModel(nn.Module):
    def __init__(self, unit_dim: int, provenance_dim: int, config: SetModelConfig = SetModelConfig(),
                 states: tuple[str, ...] = STATES) -> None:
        super().__init__()
        w = config.width
        self.config = config
        self.states = tuple(states)
        """The state head's classes, in order (QA: three; clinical: four, with ``stale``)."""
        mask = config.mask_dropout
        self.unit_in = nn.Sequential(nn.Linear(unit_dim, w), nn.LayerNorm(w), dropout_module(config.dropout, mask))
        self.query = nn.Parameter(torch.randn(w) * 0.02)
        self.provenance_in = nn.Linear(provenance_dim, w)
        if config.attention:
            layer = nn.TransformerEncoderLayer(w, config.heads, 4 * w, config.dropout, activation="gelu",
                                               batch_first=True, norm_first=True)
            if mask:  # the layer's three residual-path dropouts (attention weights': inside SDPA)
                layer.dropout, layer.dropout1, layer.dropout2 = (MaskDropout(config.dropout) for _ in range(3))
            self.body: nn.Module = nn.TransformerEncoder(layer, config.layers, enable_nested_tensor=False)
        else:
            self.body = nn.Sequential(*[_FeedForward(w, config.dropout, mask) for _ in range(config.layers)])
            self.pool = nn.Sequential(nn.Linear(2 * w, w), nn.GELU())
        self.norm = nn.LayerNorm(w)
        self.unsafe_head = nn.Linear(w, 1)
        self.state_head = nn.Linear(w, len(self.states))
        self.count_head = nn.Linear(w, 1)
        self.unit_head = nn.Linear(w, 1)

    def forward(self, batch: SetBatch) -> dict[str, torch.Tensor]:
        units = self.unit_in(batch.units)
        query = (self.query + self.provenance_in(batch.provenance)).unsqueeze(1)
        if self.config.attention:
            tokens = torch.cat([query, units], dim=1)
            pad = torch.cat([torch.zeros_like(batch.mask[:, :1]), ~batch.mask], dim=1)
            out = self.norm(self.body(tokens, src_key_padding_mask=pad))
            summary, unit_out = out[:, 0], out[:, 1:]
        else:
            unit_out = self.norm(self.body(units))
            m = batch.mask.unsqueeze(-1).to(unit_out.dtype)
            mean = (unit_out * m).sum(1) / m.sum(1).clamp(min=1.0)
            summary = self.pool(torch.cat([self.norm(query.squeeze(1)), mean], dim=-1))
        return {"unsafe": self.unsafe_head(summary).squeeze(-1), "state": self.state_head(summary),
                "count": self.count_head(summary).squeeze(-1), "unit": self.unit_head(unit_out).squeeze(-1)}


def loss_fn(out: dict[str, torch.Tensor], batch: SetBatch, localization: bool = True) -> torch.Tensor:
    """BCE (unsafe) + CE (state) + masked per-unit BCE + smooth L1 (missing count), equally weighted."""
    assert batch.unsafe is not None and batch.state is not None and batch.evidence is not None
    assert batch.missing is not None
    loss = (nn.functional.binary_cross_entropy_with_logits(out["unsafe"], batch.unsafe)
            + nn.functional.cross_entropy(out["state"], batch.state))
    if localization:
        per_unit = nn.functional.binary_cross_entropy_with_logits(out["unit"], batch.evidence, reduction="none")
        m = batch.mask.to(per_unit.dtype)
        loss = loss + (per_unit * m).sum() / m.sum() + nn.functional.smooth_l1_loss(out["count"], batch.missing)
    return loss


def _autocast(config: SetModelConfig, device: torch.device | str) -> torch.autocast:
    """bf16 autocast when the config asks for it and the device computes bf16 fast (a no-op
    context otherwise)."""
    kind = torch.device(device).type
    return torch.autocast(device_type=kind, dtype=torch.bfloat16, enabled=use_bf16(config.bf16, kind))


@dataclass
class SetOutputs:
    unsafe_prob: np.ndarray
    state_prob: np.ndarray
    unit_prob: list[np.ndarray]
    missing_count: np.ndarray
    states: tuple[str, ...] = STATES

    @property
    def state(self) -> np.ndarray:
        return np.array([self.states[i] for i in self.state_prob.argmax(1)], dtype=object)


def _held_threads(device: torch.device | str) -> Any:
    """One torch thread for Stage B on CPU (:data:`memsafe_lib.config.STAGE_B_THREADS`)."""
    return torch_threads_held(STAGE_B_THREADS) if torch.device(device).type == "cpu" else nullcontext()


def predict_sets(model: SetModel, units: Sequence[np.ndarray], provenance: np.ndarray,
                 batch_size: int = 256) -> SetOutputs:
    device = next(model.parameters()).device
    with _held_threads(device):
        return _predict_sets(model, units, provenance, batch_size, device)


@torch.no_grad()
def _predict_sets(model: SetModel, units: Sequence[np.ndarray], provenance: np.ndarray, batch_size: int,
                  device: torch.device) -> SetOutputs:
    model.eval()
    order = np.argsort([len(u) for u in units], kind="stable")  # similar sizes share a batch
    unsafe = np.zeros(len(units), np.float32)
    states = np.zeros((len(units), len(model.states)), np.float32)
    count = np.zeros(len(units), np.float32)
    unit_prob: list[np.ndarray] = [np.empty(0)] * len(units)
    for i in range(0, len(order), batch_size):
        idx = order[i:i + batch_size]
        batch = collate([units[j] for j in idx], provenance[idx]).to(device)
        with _autocast(model.config, device):
            out = {k: v.float().cpu() for k, v in model(batch).items()}
        unsafe[idx] = torch.sigmoid(out["unsafe"]).numpy()
        states[idx] = torch.softmax(out["state"], -1).numpy()
        count[idx] = out["count"].clamp(min=0).numpy()
        probs = torch.sigmoid(out["unit"]).numpy()
        for k, j in enumerate(idx):
            unit_prob[j] = probs[k, :len(units[j])]
    return SetOutputs(unsafe, states, unit_prob, count, model.states)


@dataclass
class TrainLog:
    epochs: list[dict[str, float]] = field(default_factory=list)
    best_epoch: int = 0


def train_set_model(units: Sequence[np.ndarray], provenance: np.ndarray, targets: dict[str, Any],
                    config: SetModelConfig, seed: int,
                    validation: tuple[Sequence[np.ndarray], np.ndarray, np.ndarray, list[str]] | None = None,
                    device: str = "cpu", states: tuple[str, ...] = STATES) -> tuple[SetModel, TrainLog]:
    """Train with AdamW; keep the epoch with the best validation AUROC (macro-F1 tie-break).

    ``validation`` = (units, provenance, unsafe labels, state labels). Deterministic for a
    seed on CPU: one generator drives initialisation, dropout and the batch order. ``device``:
    where the model trains (initialised on CPU first, so a seed gives the same start anywhere).
    On CPU it trains on one torch thread whatever the process's setting, so a seed gives the
    same fit on any machine (:data:`memsafe_lib.config.STAGE_B_THREADS`).
    """
    with _held_threads(device):
        return _train_set_model(units, provenance, targets, config, seed, validation, device, states)


def _train_set_model(units: Sequence[np.ndarray], provenance: np.ndarray, targets: dict[str, Any],
                     config: SetModelConfig, seed: int,
                     validation: tuple[Sequence[np.ndarray], np.ndarray, np.ndarray, list[str]] | None,
                     device: str, states: tuple[str, ...]) -> tuple[SetModel, TrainLog]:
    torch.manual_seed(seed)
    model = SetModel(units[0].shape[1], provenance.shape[1], config, states).to(device)
    # foreach: one call per step for all parameters instead of a Python loop over them (torch's
    # CPU default); the same arithmetic, and the same fit bit for bit on the sets we checked
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=config.weight_decay, foreach=True)
    rng = np.random.default_rng(seed)
    n = len(units)
    log = TrainLog()
    best: tuple[float, float] | None = None
    best_state = copy.deepcopy(model.state_dict())
    for epoch in range(config.epochs):
        model.train()
        order = rng.permutation(n)
        total = 0.0
        for i in range(0, n, config.batch_size):
            idx = order[i:i + config.batch_size]
            batch = collate([units[j] for j in idx], provenance[idx],
                            {k: [targets[k][j] for j in idx] for k in targets}).to(device)
            with _autocast(config, device):
                loss = loss_fn(model(batch), batch, config.localization_heads)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            total += loss.item() * len(idx)
        row = {"epoch": epoch + 1, "train_loss": total / n}
        if validation is not None:
            out = predict_sets(model, validation[0], validation[1])
            labels = present_states(validation[3])
            row["validation_auroc"] = unsafe_auroc(validation[2], out.unsafe_prob)
            row["validation_macro_f1"] = macro_f1(validation[3], list(out.state), labels)
            key = (row["validation_auroc"], row["validation_macro_f1"])
            if best is None or key > best:
                best, log.best_epoch = key, epoch + 1
                best_state = copy.deepcopy(model.state_dict())
        log.epochs.append(row)
        if validation is not None and config.patience is not None and epoch + 1 - log.best_epoch >= config.patience:
            break
    if validation is not None:
        model.load_state_dict(best_state)
    else:
        log.best_epoch = config.epochs
    model.eval()
    return model, log
