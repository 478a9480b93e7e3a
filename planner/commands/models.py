"""``models``: the bundled catalog, with each model's parameter counts (optionally searched)."""

from __future__ import annotations

import argparse

from pydantic import BaseModel, ConfigDict, Field

from planner.commands.common import field_descriptions, fmt_count, render, table
from planner.errors import PlannerError
from planner.model.families import build_spec
from planner.model.sources import CatalogEntry, catalog_entries, load_config, search_catalog

NAME = "models"
HELP = "List the bundled model catalog (works offline); --search narrows it."
EXAMPLE = "python -m planner models --search qwen3 --format json"


class CatalogModel(BaseModel):
    """One catalog entry as the models command reports it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    repo_id: str = Field(description="Hub repo id; what MODEL takes (aliases work too).")
    family: str = Field(description="Model family, e.g. llama, qwen, deepseek.")
    model_type: str | None = Field(description="config.json model_type; None if the config could not be parsed.")
    aliases: list[str] = Field(description="Short names that select the same entry.")
    params: int | None = Field(description="Total parameters (exact, tied embeddings counted once); None if unknown.")
    active_params: int | None = Field(
        description="Parameters one token uses (differs from params for MoE); None if unknown."
    )
    max_position_embeddings: int | None = Field(description="Longest context the config allows, in tokens.")
    source: str = Field(description="Where the bundled config.json copy comes from.")
    error: str | None = Field(None, description="Why the entry's config could not be parsed, if it could not.")


OUTPUT_KEYS = {
    "(list)": "One object per catalog entry, best match first with --search.",
    **field_descriptions(CatalogModel),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--search",
        metavar="Q",
        default=None,
        help="Keep entries matching Q (repo id, name or alias; case and punctuation ignored), best first.",
    )


def _row(entry: CatalogEntry) -> CatalogModel:
    try:
        loaded = load_config(entry.repo_id, prefer="catalog")
        spec = build_spec(loaded.config, loaded.name)
    except PlannerError as err:
        return CatalogModel(
            repo_id=entry.repo_id,
            family=entry.family,
            model_type=None,
            aliases=list(entry.aliases),
            params=None,
            active_params=None,
            max_position_embeddings=None,
            source=entry.source,
            error=str(err),
        )
    return CatalogModel(
        repo_id=entry.repo_id,
        family=entry.family,
        model_type=spec.model_type,
        aliases=list(entry.aliases),
        params=spec.total_params,
        active_params=spec.active_params,
        max_position_embeddings=spec.max_position_embeddings,
        source=entry.source,
    )


def run(args: argparse.Namespace) -> list[CatalogModel]:
    entries = search_catalog(args.search) if args.search else catalog_entries()
    return [_row(entry) for entry in entries]


def render_table(result: list[CatalogModel]) -> str:
    if not result:
        return "No catalog entry matches. Try a shorter --search, or run models without it."
    rows = [
        (
            m.repo_id,
            m.family,
            fmt_count(m.params),
            fmt_count(m.active_params),
            f"{m.max_position_embeddings:,}" if m.max_position_embeddings else "unknown",
            ", ".join(m.aliases),
        )
        for m in result
    ]
    title = f"{len(result)} models in the bundled catalog (parameter counts are exact)"
    return render(
        table(["repo id", "family", "params", "active", "max context", "aliases"], rows, title=title, right=(2, 3, 4))
    )
