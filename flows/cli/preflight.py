"""Everything ``vlmforge run`` can check before it starts Prefect and Ray, checked before.

A mistake used to surface 16-30 s in, after both services had started, as a Failed flow run, twice on the
terminal, or as a 38-line traceback (an unknown model), or not at all (a subset folder given as the release
gave ``catalog: 0 subsets`` and exit 0). Each check here reads only what it names (a folder listing, a
preset, a recipe or override file) and fails with one line that says what is wrong and what to type
instead: a :class:`UsageError`, exit :data:`EXIT_USAGE`.

Exit codes of ``vlmforge`` (README "Exit codes"): 0 done; 1 some subset not published or read back wrong;
2 a usage error (these checks, bad options, an unreadable input); 130 stopped by Ctrl-C, 143 by SIGTERM.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from pathlib import Path

from ...schemas.config import RunConfig
from ...tasks.errors import ConfigError, UsageError

EXIT_USAGE = 2
OVERRIDES_HINT = (
    'the form: {"subsets": {"<subset or pattern>": {"<parameter>": <number>}}} (expectations/overrides.json)'
)


def preflight_run(cfg: RunConfig, say: Callable[[str], None] = lambda _: None) -> RunConfig:
    """Check ``cfg`` before start-up; returns it with the model named by its preset. ``say`` prints the
    one note a check may have (a hub model name mapped to its preset)."""
    cfg = _model(cfg, say)
    _paths(cfg)
    _release(cfg)
    _overlaps(cfg)
    _recipes(cfg)
    _gate_overrides(cfg)
    _contradictions(cfg)
    return cfg


def resolve_model(name: str) -> str:
    """The preset for a model name as typed (a preset, a hub repository, a family with dashes)."""
    from ...schemas.model_names import closest_presets, preset_for
    from ...schemas.presets import list_presets

    known = list_presets()
    preset = preset_for(name, known)
    if preset is not None:
        return preset
    close = closest_presets(name, known)
    hint = f"did you mean --model {close[0]}?" if close else "see `vlmforge tokens --help`"
    raise UsageError(f"--model {name}: no model preset by that name (known: {', '.join(known)})", hint)


def _model(cfg: RunConfig, say: Callable[[str], None]) -> RunConfig:
    from ...tasks.geometry import load_preset

    preset = resolve_model(cfg.tokens.model)
    if preset != cfg.tokens.model:
        say(f"model: {cfg.tokens.model} counts tokens with the preset {preset}")
        cfg = cfg.replace(model=preset)
    if cfg.tokens.model_dir is not None and not Path(cfg.tokens.model_dir).is_dir():
        raise UsageError(f"--model-dir {cfg.tokens.model_dir}: no such folder", "give a local model folder")
    try:
        load_preset(cfg.tokens.model, cfg.tokens.model_dir)
    except (ValueError, OSError) as exc:
        raise UsageError(f"--model {cfg.tokens.model}: {_one_line(str(exc))}") from None
    return cfg


def _paths(cfg: RunConfig) -> None:
    tokenizer = cfg.tokens.tokenizer
    if tokenizer is not None and not _is_url(tokenizer) and not Path(tokenizer).exists():
        raise UsageError(f"--tokenizer {cfg.tokens.tokenizer}: no such file or folder")
    if not _is_url(cfg.out) and Path(cfg.out).exists() and not Path(cfg.out).is_dir():
        raise UsageError(f"--out {cfg.out}: is a file", "give a folder (it is created when missing)")


def _release(cfg: RunConfig) -> None:
    """A local release of the Nemotron layout: it exists, holds subsets, and is not one subset itself."""
    release = cfg.source.release
    if _is_url(release) or cfg.source.source_format != "nemotron":
        return  # listed by the catalog (credentials, network) or staged from another layout first
    from fsspec.implementations.local import LocalFileSystem

    from ...tasks.catalog import list_subset_names, wanted_subsets
    from ...tasks.errors import ReleaseError

    root = Path(release)
    if not root.exists():
        raise UsageError(f"release {release}: no such folder", _parent_hint(root))
    if not root.is_dir():
        raise UsageError(
            f"release {release}: not a folder", "give the folder that holds one folder per subset"
        )
    names = list_subset_names(LocalFileSystem(), str(root.resolve()))
    if (root / f"{root.name}.jsonl").is_file() and root.name not in names:
        raise UsageError(
            f"release {release} is one subset's folder (it holds {root.name}.jsonl)",
            f"give its parent and the subset: vlmforge run {root.parent} --subset {root.name} ...",
        )
    if not names:
        raise UsageError(
            f"release {release}: no subsets (a subset is a folder <name> holding <name>.jsonl)",
            "give the release's top folder",
        )
    unknown = [s for s in cfg.source.subsets if s not in names]
    if unknown:
        close = difflib.get_close_matches(unknown[0], names, n=1)
        hint = f"did you mean --subset {close[0]}?" if close else f"subsets: {_listing(names)}"
        raise UsageError(f"--subset {', '.join(unknown)}: not in release {release}", hint)
    try:  # the catalog's own name rule (a space, a slash, ...), before the services start
        wanted_subsets(LocalFileSystem(), str(root.resolve()), release, cfg.source.subsets)
    except ReleaseError as exc:
        raise UsageError(str(exc)) from None


def _overlaps(cfg: RunConfig) -> None:
    """OUT and the store overlap neither the release nor a media root, either way (``overlap.py``)."""
    from .overlap import overlap_problem

    problem = overlap_problem(cfg)
    if problem is not None:
        raise UsageError(*problem)


def _recipes(cfg: RunConfig) -> None:
    from ...tasks.catalog import RecipeError, load_recipe

    for folder in cfg.media.catalogs:
        path = Path(folder)
        if not path.is_dir():
            raise UsageError(f"--recipes {folder}: no such folder", "give a folder of <subset>.yaml recipes")
        for recipe in sorted(path.glob("*.yaml")):
            try:
                load_recipe(recipe)
            except RecipeError as exc:
                raise UsageError(_one_line(str(exc))) from None


def _gate_overrides(cfg: RunConfig) -> None:
    from ...tasks.gate import load_overrides

    if cfg.gate.gate_overrides is None:
        return
    if cfg.gate.skip_gate:
        raise UsageError("--gate-overrides with --skip-gate: the overrides would never be used", "drop one")
    try:
        load_overrides(cfg.gate.gate_overrides)
    except ConfigError as exc:
        raise UsageError(_one_line(str(exc)), OVERRIDES_HINT) from None


# Options that mean nothing without another: (given, needs, why), each a predicate over the config.
_NEEDS: tuple[tuple[str, Callable[[RunConfig], bool], Callable[[RunConfig], bool], str], ...] = (
    (
        "--config",
        lambda c: bool(c.source.source_configs),
        lambda c: c.source.source_format != "nemotron",
        "give --format too (configs belong to a staged source such as mantis)",
    ),
    (
        "--video-max-pixels",
        lambda c: c.media.video_max_pixels is not None,
        lambda c: c.media.video_mode == "frames",
        "it caps sampled frames: add --video-mode frames",
    ),
    (
        "--seq-len-mode truncate",
        lambda c: c.tokens.seq_len_mode == "truncate",
        lambda c: c.tokens.seq_len is not None,
        "add --seq-len N (the length to cut to)",
    ),
    (
        "--frames-mode truncate",
        lambda c: c.tokens.frames_mode == "truncate",
        lambda c: c.tokens.max_num_frames is not None,
        "add --max-num-frames N",
    ),
)


# Combinations the trainer cannot consume as counted: (applies, problem, hint).
_REFUSED: tuple[tuple[Callable[[RunConfig], bool], str, str], ...] = (
    (
        # Megatron-Bridge 0.6.2's ChatMLWebdataset decodes a sample's `videos` part only as a pickled list of
        # frame images (task_encoder_utils.videohandler: jpgs/mp4s/videos all unpickle to JPEG frames), never
        # a video file; a kept video would reach it only as frames decoded at publish time at the upright
        # displayed size, which the fed counts (modelled from the stored frames) do not describe.
        lambda c: c.media.video_mode == "keep" and c.tokens.feed_path == "bridge_collate",
        "--video-mode keep with a Bridge trainer (--feed-path bridge_collate): Bridge reads a video only "
        "as a list of frame images, never a video file",
        "use --video-mode frames (the trainer's default)",
    ),
)


def _contradictions(cfg: RunConfig) -> None:
    for given, is_given, needs, hint in _NEEDS:
        if is_given(cfg) and not needs(cfg):
            raise UsageError(f"{given} has no effect as given", hint)
    for applies, problem, hint in _REFUSED:
        if applies(cfg):
            raise UsageError(problem, hint)
    t = cfg.tokens
    if t.min_pixels is not None and t.max_pixels is not None and t.min_pixels > t.max_pixels:
        raise UsageError(f"--min-pixels {t.min_pixels} is above --max-pixels {t.max_pixels}", "swap them")


def _is_url(text: str) -> bool:
    return "://" in text


def _parent_hint(root: Path) -> str:
    parent = next((p for p in root.absolute().parents if p.is_dir()), None)
    if parent is None:
        return "check the path"
    near = difflib.get_close_matches(root.name, [p.name for p in parent.iterdir() if p.is_dir()], n=1)
    return f"did you mean {parent / near[0]}?" if near else f"{parent} exists; check the rest of the path"


def _listing(names: list[str], at_most: int = 8) -> str:
    more = f", ... ({len(names)} in all)" if len(names) > at_most else ""
    return ", ".join(names[:at_most]) + more


def _one_line(text: str) -> str:
    return " ".join(part.strip() for part in text.splitlines() if part.strip())
