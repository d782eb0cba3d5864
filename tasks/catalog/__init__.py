"""What a release holds, before any media work: subsets, hashes, rows, licenses, batch plans, media recipes,
and what a refresh changes."""

from __future__ import annotations

from .recipe_files import RecipeError, builtin_catalog_dir, check_ready, find_recipe, load_recipe
from .recipe_init import draft_recipe
from .refresh import (
    RefreshPlan,
    catalog_columns,
    last_run_options,
    parse_license_allow,
    plan_refresh,
    plan_release_refresh,
    read_previous_catalog,
    refresh_config,
    split_by_license,
    unpublish_subset,
    write_subsets_row,
)
from .release_catalog import catalog_release, list_subset_names, wanted_subsets
from .revision import release_revision
from .scan import strip_bom
from .storage_options import parse_storage_options

__all__ = [
    "RecipeError",
    "RefreshPlan",
    "builtin_catalog_dir",
    "catalog_columns",
    "catalog_release",
    "check_ready",
    "draft_recipe",
    "find_recipe",
    "last_run_options",
    "list_subset_names",
    "load_recipe",
    "parse_license_allow",
    "parse_storage_options",
    "plan_refresh",
    "plan_release_refresh",
    "read_previous_catalog",
    "refresh_config",
    "release_revision",
    "split_by_license",
    "strip_bom",
    "unpublish_subset",
    "write_subsets_row",
    "wanted_subsets",
]
