"""The controls explorer: its pure functions on synthetic memories, and the widget wiring."""

from __future__ import annotations

import html
from html.parser import HTMLParser

import pytest
from matplotlib.figure import Figure
from sklearn.metrics import roc_auc_score

from memsafe_lib.config import SCALES
from memsafe_lib.data.records import BaseQuery, Provenance, Unit
from memsafe_lib.estimators.controls import CONTROLS
from memsafe_lib.reporting import explorer as X
from memsafe_lib.variants import construction as C
from tests.conftest import requires_real_data

N_QUERIES = 60


def _query(i: int) -> BaseQuery:
    """|S| + |D| = 6 for every query, with |S| in {2, 3} (distinct titles, so relation-lost
    exists) and |D| >= |S|: size-matched memories have |D| units (3 or 4, so the count
    feature varies), and under deletion every complete memory (6 units) is larger than
    every unsafe one (at most |D| + |S| - 1 = 5)."""
    n_s = 2 + i % 2
    n_d = 6 - n_s
    kinds = [(f"Evidence {i}.{k}", True) for k in range(n_s)] + [(f"Distractor {i}.{k}", False) for k in range(n_d)]
    kinds = kinds[i % 6:] + kinds[: i % 6]  # evidence at varying positions
    units = tuple(
        Unit(f"q{i}:{pos}", title, f"Paragraph about {title}. " + "word " * (5 + (7 * i + pos) % 30), ev, pos)
        for pos, (title, ev) in enumerate(kinds)
    )
    return BaseQuery(f"q{i}", "synthetic", f"What about {i}?", ("answer",), units, True,
                     Provenance("synthetic.json", i, "0" * 64))


@pytest.fixture(scope="module")
def queries() -> list[BaseQuery]:
    qs = [_query(i) for i in range(N_QUERIES)]
    splits = {C.assign_split(q.id) for q in qs}
    assert splits == set(C.SPLITS), "the synthetic ids must reach every split"
    return qs


@pytest.fixture(scope="module")
def data(queries: list[BaseQuery]) -> X.ExplorerData:
    return X.ExplorerData.from_results([C.build_size_matched(queries), C.build_deletion(queries)])


def test_from_results_fits_every_control(data: X.ExplorerData) -> None:
    assert data.datasets() == ["synthetic"]
    assert data.constructions("synthetic") == ["size-matched", "deletion"]
    assert set(data.controls("synthetic", "deletion")) == {"majority", "paragraph_count", "text_length",
                                                           "provenance_only"}
    assert not data.skipped


def test_every_split_has_all_three_states(data: X.ExplorerData) -> None:
    for result in data.results.values():
        for split in C.SPLITS:
            states = {v.state for v in result.variants if v.split == split}
            assert states == set(C.STATES), (result.construction, split)


@pytest.mark.parametrize("construction", ["size-matched", "deletion"])
@pytest.mark.parametrize("control", ["paragraph_count", "text_length", "provenance_only", "majority"])
def test_view_auroc_matches_sklearn(data: X.ExplorerData, construction: str, control: str) -> None:
    view = X.control_view(data, "synthetic", construction, control)
    result = data.fitted[("synthetic", construction)][control]
    labels = [v.state != C.COMPLETE for v in result.variants]
    assert view.auroc == pytest.approx(roc_auc_score(labels, result.predictions.unsafe_prob), abs=1e-12)
    # The long frame carries the same scores and states.
    assert view.scores["state"].tolist() == [v.state for v in result.variants]
    assert view.scores["score"].tolist() == pytest.approx(result.predictions.unsafe_prob.tolist())
    assert view.auroc == pytest.approx(roc_auc_score(view.scores["state"] != C.COMPLETE, view.scores["score"]))
    assert view.n_test == len(result.variants)
    assert list(view.summary.index) == list(C.STATES)
    assert view.summary["count"].sum() == view.n_test


def test_paragraph_count_is_chance_under_size_matching_and_perfect_under_deletion(data: X.ExplorerData) -> None:
    matched = X.control_view(data, "synthetic", "size-matched", "paragraph_count")
    deletion = X.control_view(data, "synthetic", "deletion", "paragraph_count")
    assert matched.auroc == pytest.approx(0.5, abs=1e-12)
    # Not a constant feature: size-matched memories have 3 or 4 units depending on the query.
    test = X.sample_variants(data, "synthetic", "size-matched")
    assert {len(v.units) for v in test} == {3, 4}
    assert deletion.auroc == pytest.approx(1.0, abs=1e-12)


def test_auroc_table(data: X.ExplorerData) -> None:
    table = X.auroc_table(data)
    assert list(table.columns) == ["dataset", "construction", "control", "unsafe_auroc", "macro_f1", "n_test"]
    assert len(table) == 8
    for row in table.itertuples():
        view = X.control_view(data, row.dataset, row.construction, row.control)
        assert row.unsafe_auroc == view.auroc and row.macro_f1 == view.macro_f1 and row.n_test == view.n_test


def test_unknown_selection_raises(data: X.ExplorerData) -> None:
    with pytest.raises(KeyError):
        X.control_view(data, "synthetic", "family-b", "paragraph_count")
    with pytest.raises(KeyError):
        X.control_view(data, "synthetic", "deletion", "oracle")


def test_sample_variants_are_deterministic(queries: list[BaseQuery]) -> None:
    forward = X.ExplorerData.from_results([C.build_deletion(queries)], controls=["majority"])
    backward = X.ExplorerData.from_results([C.build_deletion(list(reversed(queries)))], controls=["majority"])
    a = X.sample_variants(forward, "synthetic", "deletion")
    b = X.sample_variants(backward, "synthetic", "deletion")
    assert [v.variant_id for v in a] == [v.variant_id for v in b]
    assert a and all(v.split == "test" for v in a)
    assert [v.state for v in a[:3]] == list(C.STATES)  # one question's states side by side
    assert len({v.base_id for v in a[:3]}) == 1
    train = X.sample_variants(forward, "synthetic", "deletion", split="train")
    assert train and all(v.split == "train" for v in train)


class _Rows(HTMLParser):
    """Collects table body rows: (is evidence, cell texts)."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[tuple[bool, list[str]]] = []
        self.tags: list[str] = []
        self._in_body = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        if tag == "tbody":
            self._in_body = True
        elif tag == "tr" and self._in_body:
            self.rows.append((dict(attrs).get("class") == "evidence", []))
        elif tag == "td" and self.rows:
            self.rows[-1][1].append("")

    def handle_endtag(self, tag: str) -> None:
        if tag == "tbody":
            self._in_body = False

    def handle_data(self, data: str) -> None:
        if self._in_body and self.rows and self.rows[-1][1]:
            self.rows[-1][1][-1] += data


def _hostile_variant() -> C.Variant:
    units = (
        C.MemoryUnit("u0", "<script>alert(1)</script>", "plain & simple", False, 0, 0),
        C.MemoryUnit("u1", "Evidence <b>one</b>", "x" * 1000, True, 1, 2),
        C.MemoryUnit("u2", "Distractor", "<img src=x onerror=alert(2)>", False, 2, 3),
        C.MemoryUnit("u3", "Evidence two", "short", True, 3, 5),
    )
    return C.Variant("v<1>", "b", "synthetic", "size-matched", C.RELATION_LOST, "test", 1,
                     "Who wrote <script>x</script>?", ("a",), units, 3, 6)


def test_memory_html_escapes_and_marks_exactly_the_evidence() -> None:
    variant = _hostile_variant()
    out = X.memory_html(variant, score=0.25)
    assert "<script>" not in out and "<img" not in out and "<b>one</b>" not in out
    assert html.escape("<script>alert(1)</script>") in out
    parser = _Rows()
    parser.feed(out)
    assert "script" not in parser.tags and "img" not in parser.tags
    assert len(parser.rows) == len(variant.units)
    positions = [int(cells[0]) for _, cells in parser.rows]
    assert positions == [u.position for u in variant.units]  # memory order
    assert [ev for ev, _ in parser.rows] == [u.is_evidence for u in variant.units]
    assert [cells[2] for _, cells in parser.rows] == [u.title for u in variant.units]  # unescaped back
    long_text = parser.rows[1][1][3]
    assert len(long_text) <= X.TEXT_LIMIT + 1 and long_text.endswith("…")
    assert out.count(X.EVIDENCE_BACKGROUND) == 2
    assert "relation_lost" in out and "g = 1" in out and "0.250" in out
    assert html.escape("Who wrote <script>x</script>?") in out


def test_memory_html_on_constructed_memory(data: X.ExplorerData) -> None:
    variant = X.sample_variants(data, "synthetic", "size-matched")[0]
    parser = _Rows()
    parser.feed(X.memory_html(variant))
    assert sum(ev for ev, _ in parser.rows) == sum(u.is_evidence for u in variant.units)


def test_score_figure(data: X.ExplorerData) -> None:
    view = X.control_view(data, "synthetic", "deletion", "paragraph_count")
    fig = X.score_figure(view)
    assert isinstance(fig, Figure)
    assert len(fig.axes) == 1
    assert "1.000" in fig.axes[0].get_title()
    assert X.figure_png(fig).startswith(b"\x89PNG")


def test_build_explorer_reacts_to_dropdowns(data: X.ExplorerData) -> None:
    import ipywidgets

    widget = X.build_explorer(data)
    assert isinstance(widget, ipywidgets.Widget)
    assert isinstance(widget, X.Explorer)
    assert widget.control.value == "paragraph_count" and widget.construction.value == "size-matched"
    assert "AUROC = <b>0.500</b>" in widget.metrics.value
    assert widget.figure.outputs and "image/png" in widget.figure.outputs[0]["data"]
    first_memory = widget.memory.value

    widget.construction.value = "deletion"
    assert "AUROC = <b>1.000</b>" in widget.metrics.value
    assert "deletion" in widget.metrics.value
    assert widget.control.value == "paragraph_count"  # kept across constructions
    assert widget.memory.value != first_memory

    widget.control.value = "majority"
    assert "AUROC = <b>0.500</b>" in widget.metrics.value and "majority" in widget.metrics.value

    n = len(X.sample_variants(data, "synthetic", "deletion"))
    assert widget.sample.max == n - 1
    widget.sample.value = 1
    assert X.sample_variants(data, "synthetic", "deletion")[1].variant_id in widget.memory.value


def test_labels_are_not_cut_off(data: X.ExplorerData) -> None:
    widget = X.build_explorer(data)
    for control in (widget.dataset, widget.construction, widget.control, widget.sample):
        assert control.style.description_width == "initial", control.description


def test_static_view_is_what_the_widget_shows(data: X.ExplorerData) -> None:
    """The kernel-free view carries the same metrics, figure and memory as the widget."""
    import base64

    widget = X.build_explorer(data)
    widget.construction.value = "deletion"
    page = X.static_view(data, "synthetic", "deletion", "paragraph_count")
    assert widget.metrics.value in page and widget.memory.value in page
    png = page.split('src="data:image/png;base64,', 1)[1].split('"', 1)[0]
    assert base64.b64decode(png).startswith(b"\x89PNG")
    assert png == widget.figure.outputs[0]["data"]["image/png"]


def test_build_explorer_needs_fitted_controls() -> None:
    with pytest.raises(ValueError, match="nothing to explore"):
        X.build_explorer(X.ExplorerData.from_results([C.ConstructionResult("empty", "deletion", [], [])]))


@requires_real_data
def test_real_musique_smoke() -> None:
    blind = ("blind_bow", "blind_unit", "question_only")  # the set model's encoder is tested elsewhere
    data = X.prepare_explorer(["musique"], SCALES["smoke"], controls=(*CONTROLS, *blind))
    assert set(data.constructions("musique")) == {"size-matched", "deletion", "blind-matched", "blind-hard"}
    table = X.auroc_table(data).set_index(["construction", "control"])
    assert table.loc[("size-matched", "paragraph_count"), "unsafe_auroc"] == pytest.approx(0.5, abs=0.05)
    for control in (*CONTROLS, *blind):  # Proposition 1 over memories: exactly 1/2
        assert table.loc[("blind-matched", control), "unsafe_auroc"] == 0.5
    assert table.loc[("deletion", "paragraph_count"), "unsafe_auroc"] > 0.9
    view = X.control_view(data, "musique", "deletion", "paragraph_count")
    assert view.auroc == pytest.approx(roc_auc_score(view.scores["state"] != C.COMPLETE, view.scores["score"]))
    variant = X.sample_variants(data, "musique", "size-matched")[0]
    assert X.memory_html(variant).count('class="evidence"') == sum(u.is_evidence for u in variant.units)
    widget = X.build_explorer(data)
    widget.construction.value = "deletion"
    assert "deletion" in widget.metrics.value


def test_view_shows_per_state_auroc_against_sklearn(data: X.ExplorerData) -> None:
    """The per-state view: complete against missing and against relation-lost, each computed
    on those two states' memories only (scikit-learn), and named in the headline."""
    view = X.control_view(data, "synthetic", "deletion", "text_length")
    s = view.scores
    for state, key in ((C.MISSING, "auroc_complete_vs_missing"), (C.RELATION_LOST, "auroc_complete_vs_relation_lost")):
        part = s[s.state.isin([C.COMPLETE, state])]
        assert view.per_state[key] == pytest.approx(roc_auc_score(part.state == state, part.score), abs=1e-12)
    headline = X.format_metrics(view)
    assert f"vs missing {view.per_state['auroc_complete_vs_missing']:.3f}" in headline
    assert "vs relation-lost" in headline


def test_an_executed_copy_shows_a_pointer_not_the_widget_tree(data: X.ExplorerData) -> None:
    """Where no widget renders (GitHub, nbviewer), the cell's text/plain says how to get the live
    explorer instead of ipywidgets' children=(HBox(... repr."""
    text = repr(X.build_explorer(data))
    assert "children=" not in text and "Run All" in text and "01_construction_audit" in text
