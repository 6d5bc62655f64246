"""The figures a study asks its report for beyond the ones every report draws (the study YAML's
``figures:``), each a kind from :data:`FIGURES` with typed options::

    figures:
      layer_gradients:              # per-layer gradient norms at initialisation, by one axis
        by: model.norm_placement
        values: [post, pre]         # drawn only when the runs hold these values
        note: "cf. Xiong et al. 2020, Fig. 3: ..."  # what the figure compares, for its caption
      heatmap:                      # the final loss over two axes, one cell per pair of values
        rows: data.batch_size
        columns: optim.lr
        used: lr                    # a summary field: what the runs trained with for the columns
      length_curves:                # loss against evaluation length, one line per value of
        by: model.pos_encoding

Without a declaration the report draws a heatmap over the study's two numeric axes when it has
exactly two, and the length curves (where the runs were evaluated at several lengths) by its
only or first of two varying axes, else by variant. The report draws each kind
(``ablate.report.plots.DECLARED``); a new kind is one options model here and one function
there. Nothing here reads runs: the options are checked (known kinds, known config keys) when
the study is loaded, so a typo is one line naming the file and key before anything trains.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, ValidationError

from ablate.config import check_key
from ablate.errors import ConfigError, check_known


class FigureOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    AXIS_FIELDS: ClassVar[tuple[str, ...]] = ()
    """The option fields that name config keys (checked as such)."""


class LayerGradients(FigureOptions):
    """Per-layer gradient norms at initialisation, one line per seed, coloured by ``by``."""

    by: str
    values: tuple[Any, ...] = ()
    note: str = ""
    AXIS_FIELDS: ClassVar[tuple[str, ...]] = ("by",)


class Heatmap(FigureOptions):
    """Mean final validation loss over ``rows`` × ``columns``; ``used``: the summary field of
    what the runs trained with for the column value (shown in a cell where it differs)."""

    rows: str
    columns: str
    used: str | None = None
    AXIS_FIELDS: ClassVar[tuple[str, ...]] = ("rows", "columns")


class LengthCurves(FigureOptions):
    """Validation loss against evaluation length, one line per value of ``by`` (None: of the
    study's only or first of two varying axes, else per variant)."""

    by: str | None = None
    AXIS_FIELDS: ClassVar[tuple[str, ...]] = ("by",)


FIGURES: dict[str, type[FigureOptions]] = {
    "layer_gradients": LayerGradients,
    "heatmap": Heatmap,
    "length_curves": LengthCurves,
}


def parse_figures(raw: Any, source: Path) -> dict[str, FigureOptions]:
    """``figures:`` -> kind -> its options; ``ConfigError`` (file and key) for anything else."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ConfigError(
            "must be a mapping of figure kind -> options", key="figures", source=source
        )
    out: dict[str, FigureOptions] = {}
    for kind, options in raw.items():
        where = f"figures.{kind}"
        check_known(kind, list(FIGURES), what="figure", key=where, source=source)
        if not isinstance(options, dict):
            raise ConfigError("must be a mapping of options", key=where, source=source)
        try:
            parsed = FIGURES[kind].model_validate(options)
        except ValidationError as err:
            first = err.errors()[0]
            at = ".".join(str(p) for p in first["loc"])
            raise ConfigError(first["msg"], key=f"{where}.{at}", source=source) from None
        for name in parsed.AXIS_FIELDS:
            if getattr(parsed, name) is not None:
                check_key(getattr(parsed, name), f"{where}.{name}", source)
        out[kind] = parsed
    return out
