"""An interactive explorer of the shortcut controls (dataset × construction × control).

It shows how well a surface control separates unsafe from complete memories (test
unsafe AUROC and macro F1), how its test scores are spread over the integrity states,
and a sample memory unit by unit with its evidence highlighted, so one can *see* why
the deletion construction leaks the label and the size-matched one does not.

All logic lives in pure functions (tables, views, figures, HTML) that the tests call
directly; :func:`build_explorer` only wires ipywidgets to them, so it can be built and
driven without a running notebook frontend.
"""

from __future__ import annotations

import base64
import html
import io
import warnings
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ipywidgets as widgets
import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib import MatplotlibDeprecationWarning
from matplotlib.figure import Figure

from memsafe_lib.config import ScaleConfig
from memsafe_lib.estimators.controls import CONTROLS
from memsafe_lib.evaluation import audit
from memsafe_lib.evaluation.audit import ControlResult
from memsafe_lib.measures.metrics import macro_f1, unsafe_auroc
from memsafe_lib.reporting.construction_audit import seeded_global_rng
from memsafe_lib.variants.construction import STALE, STATES, ConstructionResult, MemoryUnit, Variant
from memsafe_lib.variants.store import build

Key = tuple[str, str]
"""(dataset, construction)."""

TEXT_LIMIT = 300
"""Characters of a unit's text shown in :func:`memory_html`; memories hold long paragraphs."""

EVIDENCE_BACKGROUND = "#ffe9a8"
STATE_COLORS = {"complete": "#4c9a5b", "missing": "#c8553d", "relation_lost": "#e0a93b", "stale": "#7a6fb0"}
STATE_ORDER = {s: i for i, s in enumerate((*STATES, STALE))}


@dataclass
class ExplorerData:
    """Constructed memories and fitted controls per (dataset, construction).

    Controls are fitted once here, not in widget callbacks, so switching dropdowns is
    instant and every view of one key sees the same fitted estimators.
    """

    results: dict[Key, ConstructionResult] = field(default_factory=dict)
    fitted: dict[Key, dict[str, ControlResult]] = field(default_factory=dict)
    """Test-split :class:`ControlResult` per control name."""
    skipped: dict[Key, str] = field(default_factory=dict)
    """Keys whose controls could not be fitted (no train or test variants), with the reason."""

    @classmethod
    def from_results(cls, results: Iterable[ConstructionResult],
                     controls: Sequence[str] = tuple(CONTROLS)) -> ExplorerData:
        """Fit ``controls`` on already built results (a notebook need not rebuild them)."""
        data = cls()
        for result in results:
            data.add(result, controls)
        return data

    def add(self, result: ConstructionResult, controls: Sequence[str] = tuple(CONTROLS)) -> None:
        """Fit every control on ``result``'s train split and keep its test predictions."""
        key = (result.dataset, result.construction)
        self.results[key] = result
        try:
            fitted = [r for r in audit.run_controls(result, controls) if r.split == "test"]
        except ValueError as err:
            self.skipped[key] = str(err)
            return
        if not fitted:
            self.skipped[key] = f"{key[0]}/{key[1]}: no test variants"
            return
        self.fitted[key] = {r.control: r for r in fitted}

    def add_fitted(self, result: ConstructionResult, fitted: Iterable[ControlResult]) -> None:
        """Keep controls already fitted elsewhere (the blind audit's), test split only."""
        key = (result.dataset, result.construction)
        self.results[key] = result
        self.fitted.setdefault(key, {}).update({r.control: r for r in fitted if r.split == "test"})

    def datasets(self) -> list[str]:
        """Datasets with at least one fitted construction, in insertion order."""
        return list(dict.fromkeys(d for d, _ in self.fitted))

    def constructions(self, dataset: str) -> list[str]:
        return [c for d, c in self.fitted if d == dataset]

    def controls(self, dataset: str, construction: str) -> list[str]:
        return list(self.fitted.get((dataset, construction), {}))

    def control_result(self, dataset: str, construction: str, control: str) -> ControlResult:
        key = (dataset, construction)
        if key not in self.fitted:
            reason = self.skipped.get(key, "not prepared")
            raise KeyError(f"no fitted controls for {dataset}/{construction}: {reason}")
        if control not in self.fitted[key]:
            have = list(self.fitted[key])
            raise KeyError(f"control {control!r} not fitted for {dataset}/{construction}; have {have}")
        return self.fitted[key][control]


def prepare_explorer(datasets: Sequence[str], scale: ScaleConfig,
                     constructions: Sequence[str] = ("size-matched", "deletion", "blind-matched", "blind-hard"), *,
                     data_dir: Path | None = None, controls: Sequence[str] = audit.AUDIT_CONTROLS) -> ExplorerData:
    """Build every dataset × construction at ``scale`` and fit the controls on each (by default
    every surface and blind control)."""
    results = [build(d, c, scale, data_dir)[1] for d in datasets for c in constructions]
    return ExplorerData.from_results(results, controls)


# --------------------------------------------------------------------------- tables


def _safe_auroc(result: ControlResult) -> float | None:
    """The AUROC, or ``None`` where one class is absent (undefined, never shown as 0.5)."""
    try:
        return unsafe_auroc([v.unsafe for v in result.variants], result.predictions.unsafe_prob)
    except ValueError:
        return None


def _macro_f1(result: ControlResult) -> float:
    states = [v.state for v in result.variants]
    labels = [s for s in STATES if s in set(states)] or sorted(set(states))
    return macro_f1(states, result.predictions.state.tolist(), labels)


def auroc_table(data: ExplorerData) -> pd.DataFrame:
    """One row per dataset × construction × control: the audit's headline numbers."""
    rows = [
        {"dataset": d, "construction": c, "control": name, "unsafe_auroc": _safe_auroc(r),
         "macro_f1": _macro_f1(r), "n_test": len(r.variants)}
        for (d, c), by_control in data.fitted.items()
        for name, r in by_control.items()
    ]
    columns = ["dataset", "construction", "control", "unsafe_auroc", "macro_f1", "n_test"]
    return pd.DataFrame(rows, columns=columns)


@dataclass
class ControlView:
    """Everything the explorer shows about one control on one test split."""

    dataset: str
    construction: str
    control: str
    auroc: float | None
    """Test unsafe AUROC; ``None`` when the test split lacks a class."""
    macro_f1: float
    n_test: int
    scores: pd.DataFrame
    """Long format, one row per test variant: variant_id, base_id, state, unsafe, score."""
    summary: pd.DataFrame
    """Per-state count / mean / std / min / median / max of the scores, indexed by state."""
    per_state: dict[str, float | None] = field(default_factory=dict)
    """Unsafe AUROC of complete against each unsafe state (``auroc_complete_vs_missing``,
    ``..._relation_lost``; None where a state is absent): where a topic gap shows first."""


def _state_key(state: str) -> tuple[int, str]:
    return (STATE_ORDER.get(state, len(STATE_ORDER)), state)


def _scores(result: ControlResult) -> pd.DataFrame:
    rows = [
        {"variant_id": v.variant_id, "base_id": v.base_id, "state": v.state, "unsafe": v.unsafe, "score": float(p)}
        for v, p in zip(result.variants, result.predictions.unsafe_prob, strict=True)
    ]
    return pd.DataFrame(rows, columns=["variant_id", "base_id", "state", "unsafe", "score"])


def _summary(scores: pd.DataFrame) -> pd.DataFrame:
    stats = scores.groupby("state")["score"].agg(["count", "mean", "std", "min", "median", "max"])
    return stats.loc[sorted(stats.index, key=_state_key)]


def control_view(data: ExplorerData, dataset: str, construction: str, control: str) -> ControlView:
    """The numbers and score distribution of one fitted control on the test split."""
    result = data.control_result(dataset, construction, control)
    scores = _scores(result)
    states = [v.state for v in result.variants]
    return ControlView(dataset, construction, control, _safe_auroc(result), _macro_f1(result),
                       len(result.variants), scores, _summary(scores),
                       audit.per_state(states, np.asarray(result.predictions.unsafe_prob, float)))


def format_metrics(view: ControlView) -> str:
    """The one-line HTML headline of a view (the explorer's AUROC label)."""
    auroc = "undefined (one class)" if view.auroc is None else f"{view.auroc:.3f}"
    return (f"<b>{html.escape(view.dataset)} / {html.escape(view.construction)} / {html.escape(view.control)}</b>"
            f" &nbsp; test unsafe AUROC = <b>{auroc}</b> &nbsp; macro F1 = {view.macro_f1:.3f}"
            f" &nbsp; n_test = {view.n_test}{_per_state_text(view.per_state)}")


def _per_state_text(per_state: dict[str, float | None]) -> str:
    names = {"auroc_complete_vs_missing": "vs missing", "auroc_complete_vs_relation_lost": "vs relation-lost"}
    parts = [f"{label} {per_state[key]:.3f}" for key, label in names.items() if per_state.get(key) is not None]
    return f" &nbsp; complete {', '.join(parts)}" if parts else ""


# --------------------------------------------------------------------------- figure


def score_figure(view: ControlView) -> Figure:
    """Box + strip plot of the test scores by integrity state, titled with the AUROC.

    Built on a bare :class:`Figure` (no pyplot state, no backend choice), so it is safe
    in tests, scripts and repeated widget callbacks.
    """
    fig = Figure(figsize=(6.0, 3.6), layout="constrained")
    ax = fig.subplots()
    order = sorted(view.scores["state"].unique(), key=_state_key)
    palette = {s: STATE_COLORS.get(s, "#888888") for s in order}
    if len(view.scores):
        with warnings.catch_warnings():  # seaborn 0.13 passes bxp(vert=...), deprecated in matplotlib 3.11
            warnings.simplefilter("ignore", MatplotlibDeprecationWarning)
            sns.boxplot(data=view.scores, x="state", y="score", hue="state", order=order, hue_order=order,
                        palette=palette, ax=ax, fliersize=0, boxprops={"alpha": 0.35}, legend=False)
        with seeded_global_rng(0):  # the same selection draws the same points
            sns.stripplot(data=view.scores, x="state", y="score", hue="state", order=order, hue_order=order,
                          palette=palette, ax=ax, size=4, jitter=0.2, alpha=0.8, legend=False)
    ax.set_ylim(-0.03, 1.03)
    ax.set_xlabel("integrity state")
    ax.set_ylabel("control's unsafe score")
    auroc = "undefined" if view.auroc is None else f"{view.auroc:.3f}"
    ax.set_title(f"{view.dataset} / {view.construction} / {view.control}: test unsafe AUROC = {auroc}", fontsize=9)
    return fig


def figure_png(fig: Figure, dpi: int = 100) -> bytes:
    """PNG bytes of a figure, rendered with the Agg canvas that ``savefig`` uses for PNG."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi)
    return buffer.getvalue()


# --------------------------------------------------------------------------- memories


def sample_variants(data: ExplorerData, dataset: str, construction: str, split: str = "test") -> list[Variant]:
    """The variants of one split, ordered by base query then state, so the three states
    of one question sit next to each other and the order never depends on load order."""
    result = data.results[(dataset, construction)]
    chosen = [v for v in result.variants if v.split == split]
    return sorted(chosen, key=lambda v: (v.base_id, _state_key(v.state), v.variant_id))


def _truncate(text: str, limit: int = TEXT_LIMIT) -> str:
    return text if len(text) <= limit else text[:limit].rstrip() + "…"


def _unit_row(unit: MemoryUnit) -> str:
    style = f' class="evidence" style="background-color:{EVIDENCE_BACKGROUND}"' if unit.is_evidence else ""
    marker = "★ evidence" if unit.is_evidence else ""
    cells = (str(unit.position), str(unit.source_position), html.escape(unit.title),
             html.escape(_truncate(unit.text)), marker)
    return f"<tr{style}>" + "".join(f'<td style="vertical-align:top;padding:2px 6px">{c}</td>' for c in cells) + "</tr>"


def memory_html(variant: Variant, score: float | None = None) -> str:
    """One memory as an HTML table in memory order, evidence units highlighted.

    Every text field is escaped: titles and paragraphs come from web data.
    """
    color = STATE_COLORS.get(variant.state, "#888888")
    header = [
        f'<div><b>question</b>: {html.escape(variant.question)}</div>',
        f'<div><b>state</b>: <span style="color:{color};font-weight:bold">{html.escape(variant.state)}</span>'
        f" &nbsp; <b>missing</b> g = {variant.missing_count} of |S| = {variant.n_evidence}"
        f" &nbsp; <b>units</b> = {len(variant.units)} of {variant.source_units}"
        f" &nbsp; <b>split</b> = {html.escape(variant.split)}</div>",
        f'<div style="color:#666;font-size:smaller">{html.escape(variant.variant_id)}</div>',
    ]
    if score is not None:
        header.append(f"<div><b>control's unsafe score</b> = {score:.3f}</div>")
    head = "".join(f"<th style='text-align:left;padding:2px 6px'>{h}</th>"
                   for h in ("pos", "src", "title", "text", ""))
    rows = "".join(_unit_row(u) for u in variant.units)
    table = f'<table style="border-collapse:collapse;font-size:smaller"><thead><tr>{head}</tr></thead>' \
            f"<tbody>{rows}</tbody></table>"
    return '<div class="memsafe-memory">' + "".join(header) + table + "</div>"


def variant_score(data: ExplorerData, variant: Variant, control: str) -> float | None:
    """The control's test score for one variant (``None`` if it was not scored)."""
    result = data.control_result(variant.dataset, variant.construction, control)
    for v, p in zip(result.variants, result.predictions.unsafe_prob, strict=True):
        if v.variant_id == variant.variant_id:
            return float(p)
    return None


# --------------------------------------------------------------------------- widget


EXPLORER_POINTER = ("Explorer: a live widget. Open notebooks/01_construction_audit.py in JupyterLab (`make lab`), "
                    "Run All (a minute or two at the default smoke scale), then use the dropdowns; a .py notebook's "
                    "outputs are gone on reload.")
"""What the executed copy shows where a viewer renders no widgets (its text/plain output)."""


class Explorer(widgets.VBox):
    """The explorer widget; its parts are attributes so tests and notebooks can drive it."""

    def __repr__(self) -> str:
        return EXPLORER_POINTER  # not ipywidgets' Explorer(children=(HBox(... tree

    def __init__(self, data: ExplorerData) -> None:
        if not data.fitted:
            raise ValueError(f"nothing to explore: no fitted controls (skipped: {data.skipped})")
        self.data = data
        self._busy = False
        dataset = data.datasets()[0]
        constructions = data.constructions(dataset)
        label = {"style": {"description_width": "initial"}}  # the default width cuts "construction" off
        self.dataset = widgets.Dropdown(options=data.datasets(), value=dataset, description="dataset", **label)
        self.construction = widgets.Dropdown(options=constructions, value=constructions[0],
                                             description="construction", **label)
        controls = data.controls(dataset, constructions[0])
        self.control = widgets.Dropdown(options=controls, value=_default_choice(controls), description="control",
                                        **label)
        self.sample = widgets.IntSlider(value=0, min=0, max=0, description="memory", continuous_update=False,
                                        **label)
        self.metrics = widgets.HTML()
        self.figure = widgets.Output()
        self.memory = widgets.HTML()
        self._samples: list[Variant] = []
        super().__init__([widgets.HBox([self.dataset, self.construction, self.control]), self.metrics,
                          self.figure, self.sample, self.memory])
        self.dataset.observe(self._on_dataset, names="value")
        self.construction.observe(self._on_construction, names="value")
        self.control.observe(self._on_control, names="value")
        self.sample.observe(self._on_sample, names="value")
        self._on_key_changed()

    @contextmanager
    def _quiet(self) -> Iterator[None]:
        """Mute observers while options are replaced, so one change renders once."""
        self._busy, was = True, self._busy
        try:
            yield
        finally:
            self._busy = was

    def _on_dataset(self, _: dict[str, Any]) -> None:
        if self._busy:
            return
        with self._quiet():
            _set_options(self.construction, self.data.constructions(self.dataset.value))
        self._on_key_changed()

    def _on_construction(self, _: dict[str, Any]) -> None:
        if not self._busy:
            self._on_key_changed()

    def _on_control(self, _: dict[str, Any]) -> None:
        if not self._busy:
            self._show_control()
            self._show_memory()

    def _on_sample(self, _: dict[str, Any]) -> None:
        if not self._busy:
            self._show_memory()

    def _on_key_changed(self) -> None:
        """A new (dataset, construction): new control list, new samples, full redraw."""
        with self._quiet():
            _set_options(self.control, self.data.controls(self.dataset.value, self.construction.value))
            self._samples = sample_variants(self.data, self.dataset.value, self.construction.value)
            self.sample.max = max(len(self._samples) - 1, 0)
            self.sample.value = min(self.sample.value, self.sample.max)
        self._show_control()
        self._show_memory()

    def _show_control(self) -> None:
        view = control_view(self.data, self.dataset.value, self.construction.value, self.control.value)
        self.metrics.value = format_metrics(view)
        fig = score_figure(view)
        png = base64.b64encode(figure_png(fig)).decode("ascii")
        # Set the outputs directly: works with and without a kernel, never prints to stdout.
        self.figure.outputs = ({"output_type": "display_data", "metadata": {},
                                "data": {"image/png": png, "text/plain": fig.axes[0].get_title()}},)

    def _show_memory(self) -> None:
        if not self._samples:
            self.memory.value = "<i>no test memories</i>"
            return
        variant = self._samples[self.sample.value]
        self.memory.value = memory_html(variant, variant_score(self.data, variant, self.control.value))


def _default_choice(options: Sequence[str]) -> str:
    """The first option, except that controls open on paragraph count (Proposition 1's subject)."""
    return "paragraph_count" if "paragraph_count" in options else options[0]


def _set_options(dropdown: widgets.Dropdown, options: Sequence[str]) -> None:
    """Replace a dropdown's options, keeping its value when still offered."""
    keep = dropdown.value if dropdown.value in options else None
    dropdown.options = list(options)
    if options:
        dropdown.value = keep if keep is not None else _default_choice(options)


def static_view(data: ExplorerData, dataset: str, construction: str, control: str, sample: int = 0) -> str:
    """What the explorer shows for one selection, as self-contained HTML (figure inlined).

    An executed notebook opened without a kernel, or on a site that renders no widgets,
    shows this beside the widget; it is built by the same functions the widget calls."""
    view = control_view(data, dataset, construction, control)
    png = base64.b64encode(figure_png(score_figure(view))).decode("ascii")
    samples = sample_variants(data, dataset, construction)
    memory = ""
    if samples:
        variant = samples[min(sample, len(samples) - 1)]
        memory = memory_html(variant, variant_score(data, variant, control))
    return (f'<div class="memsafe-static-view">{format_metrics(view)}'
            f'<div><img alt="{html.escape(view.dataset)} {html.escape(view.construction)} score distribution" '
            f'src="data:image/png;base64,{png}"/></div>{memory}</div>')


def build_explorer(data: ExplorerData) -> widgets.Widget:
    """The explorer widget (an :class:`Explorer`); display it in a notebook cell."""
    return Explorer(data)


__all__ = [
    "ControlView", "Explorer", "ExplorerData", "auroc_table", "build_explorer", "control_view", "figure_png",
    "format_metrics", "memory_html", "prepare_explorer", "sample_variants", "score_figure", "static_view",
    "variant_score",
]
