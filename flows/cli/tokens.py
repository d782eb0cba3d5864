"""CLI commands ``tokens``, ``plan`` and ``stats`` (registered on the main app by ``flows/cli/__init__.py``).

``tokens`` answers "what will these cost?" from sizes alone, with the same code the pipeline counts with;
``plan`` packs a run's ok samples into sequences; ``stats`` prints per-subset numbers and writes an HTML
report.
"""

from __future__ import annotations

import json
import re
import sys
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from .options import config_options

if TYPE_CHECKING:
    from ...tasks.geometry import ModelGeometry
    from ...tasks.ops import PlanResult, StatsReport
    from ...tasks.tokens import ImageSize, MediaTokens, VideoSize

__all__ = ["parse_image_size", "parse_video", "register"]

console = Console()

TOKENS_EXAMPLES = """
Examples:

  vlmforge tokens --model qwen3_vl --image 1920x1080 --image 640x480 --video 1280x720:300@30

  vlmforge tokens --model qwen2_5_vl --max-pixels 1003520 --image 4000x3000 --json

  vlmforge tokens --model internvl --image 800x600
"""

PLAN_EXAMPLES = """
Examples:

  vlmforge plan ./out --seq-len 16384 --pad-multiple 64

  vlmforge plan ./out --seq-len 8192 --mix --subset docvqa --subset chartqa_1

  vlmforge plan ./out --seq-len 16384 --mix --balance visual --dp 8
"""

STATS_EXAMPLES = """
Examples:

  vlmforge stats ./out

  vlmforge stats ./out --html ./stats.html --json
"""

_SIZE = re.compile(r"^\s*(\d+)\s*[xX×]\s*(\d+)\s*$")
_VIDEO = re.compile(r"^\s*(\d+)\s*[xX×]\s*(\d+)\s*:\s*(\d+)\s*@\s*(\d+(?:\.\d+)?)\s*$")


# the run config's options the tokens command takes (the same flags, defaults and help as ``run``'s)
TOKENS_OPTIONS = ("model", "model_dir", "max_pixels", "min_pixels", "max_num_frames", "frames_mode")


def parse_image_size(text: str) -> ImageSize:
    """``WIDTHxHEIGHT`` -> its :class:`~vlmforge.tasks.tokens.ImageSize`."""
    from ...tasks.tokens import ImageSize

    m = _SIZE.match(text)
    if not m or int(m.group(1)) <= 0 or int(m.group(2)) <= 0:
        raise typer.BadParameter(f"{text!r} is not WIDTHxHEIGHT with positive integers (e.g. 1920x1080)")
    return ImageSize(int(m.group(1)), int(m.group(2)))


def parse_video(text: str) -> VideoSize:
    """``WIDTHxHEIGHT:FRAMES@FPS`` -> its :class:`~vlmforge.tasks.tokens.VideoSize`."""
    from ...tasks.tokens import VideoSize

    m = _VIDEO.match(text)
    if not m or min(int(m.group(1)), int(m.group(2)), int(m.group(3))) <= 0 or float(m.group(4)) <= 0:
        raise typer.BadParameter(
            f"{text!r} is not WIDTHxHEIGHT:FRAMES@FPS with positive numbers (e.g. 1280x720:300@30)"
        )
    return VideoSize(int(m.group(1)), int(m.group(2)), int(m.group(3)), float(m.group(4)))


def _emit_json(doc: Any) -> None:
    sys.stdout.write(json.dumps(doc, ensure_ascii=False) + "\n")


def _tokens_geometry(options: dict[str, Any]) -> ModelGeometry:
    """The geometry a run with these options counts with (the same :meth:`ModelGeometry.of`, so the same
    pixel bounds); a usage error for an option the run config refuses or an unknown model."""
    from pydantic import ValidationError

    from ...schemas.config import MediaOptions, TokenOptions
    from ...tasks.geometry import ModelGeometry, load_preset
    from .one_line_errors import usage_error_of
    from .preflight import resolve_model

    try:
        knobs = TokenOptions.model_validate(options)
    except ValidationError as exc:
        raise usage_error_of(exc, "vlmforge tokens") from None
    try:
        preset = load_preset(resolve_model(knobs.model), knobs.model_dir)  # hub names map to presets too
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    return ModelGeometry.of(preset, knobs, MediaOptions())


def _print_token_rows(geometry: ModelGeometry, rows: list[MediaTokens], total: int) -> None:
    shows_tiles = geometry.family.reports_tiles
    t = Table(title=f"visual tokens for {geometry.preset.name} (one sample)")
    for col in ("kind", "size (WxH)", "model sees (WxH)", "tiles", "frames", "tokens"):
        t.add_column(col, justify="left" if col in ("kind", "size (WxH)", "model sees (WxH)") else "right")
    for row in rows:
        t.add_row(
            row.kind,
            row.size,
            row.seen,
            "" if row.tiles is None or not shows_tiles else str(row.tiles),
            "" if row.frames is None else str(row.frames),
            f"{row.tokens:,}",
        )
    t.add_row("total", "", "", "", "", f"{total:,}", style="bold")
    console.print(t)
    console.print(
        "Text tokens (template, wrappers, timestamps) come on top; the pipeline counts them exactly."
    )


def _print_plan(r: PlanResult, out: str, seq_len: int, pad_multiple: int) -> None:
    t = Table(title=f"sequence plan: seq_len {seq_len:,}, pad multiple {pad_multiple} ({r.scope})")
    for col in ("subset", "split", "samples", "packs", "tokens", "efficiency", "too long"):
        t.add_column(col, justify="left" if col in ("subset", "split") else "right")
    for g in r.groups:
        cap = g.capacity(seq_len)
        t.add_row(
            g.name, g.split, f"{g.samples:,}", f"{g.packs:,}", f"{g.tokens:,}",
            f"{g.tokens / cap:.1%}" if cap else "-", f"{g.too_long:,}",
        )  # fmt: skip
    console.print(t)
    console.print(
        f"packing efficiency {r.efficiency:.2%} (tokens / (packs x seq_len)); padding waste "
        f"{r.padding_waste:.2%} from rounding to {pad_multiple}, {r.tail_waste:.2%} empty pack tails; "
        f"{r.packs:,} packs of {r.samples:,} samples"
    )
    if r.too_long:
        console.print(
            f"[yellow]{r.too_long:,} ok sample(s) longer than {seq_len:,} tokens are not in the "
            "plan[/yellow] (run with --seq-len to drop or truncate them)"
        )
    if r.balance is not None:
        b = r.balance
        console.print(
            f"encoder load (visual tokens) max/mean per step over {b.dp} ranks, {b.steps} full step(s): "
            f"before {b.before_mean:.3f} (worst {b.before_max:.3f}), after {b.after_mean:.3f} "
            f"(worst {b.after_max:.3f}); {b.swaps} sample exchange(s)"
        )
    console.print(f"plan written: {len(r.paths)} part(s) under {out.rstrip('/')}/manifests/plan/")


def _print_stats(report: StatsReport, out: str) -> None:
    t = Table(title=f"vlmforge stats: {out}")
    for col in ("subset", "rows", "ok", "rejected", "dropped", "images", "videos", "resized images"):
        t.add_column(col, justify="left" if col == "subset" else "right", overflow="fold")
    for s in report.subsets:
        t.add_row(
            s.subset,
            *(f"{v:,}" for v in (s.rows, s.ok, s.rejected, s.dropped, s.images, s.videos, s.resized_images)),
        )
    console.print(t)
    k = Table(title="tokens of the ok samples (p50 / p95 nearest-rank)")
    for col in ("subset", "tokens", "sum", "p50", "p95", "max"):
        k.add_column(col, justify="left" if col in ("subset", "tokens") else "right", overflow="fold")
    for s in report.subsets:
        for i, (name, d) in enumerate((("text", s.text), ("visual", s.visual), ("total", s.total))):
            k.add_row(
                s.subset if i == 0 else "",
                name,
                *(f"{v:,}" for v in (d.sum, d.p50, d.p95, d.max)),
                end_section=i == 2,
            )
    console.print(k)
    h = Table(title="images per sample (ok samples)")
    h.add_column("subset")
    h.add_column("histogram (images: samples)", overflow="fold")
    for s in report.subsets:
        h.add_row(s.subset, "  ".join(f"{k}: {v:,}" for k, v in sorted(s.images_per_sample.items())))
    console.print(h)
    if report.stages:
        st = Table(
            title=f"stage times of run {report.stage_run} (wall seconds; per subset: summed over batches)"
        )
        for col in ("subset", "stage", "seconds", "items", "items/s", "MB/s", "batches", "skipped"):
            st.add_column(col, justify="left" if col in ("subset", "stage") else "right", overflow="fold")
        for r in report.stages:
            st.add_row(
                r["subset"],
                r["stage"],
                f"{r['seconds']:.2f}",
                "" if r["items"] is None else f"{r['items']:,} {r['unit'] or ''}".strip(),
                "" if r["items_per_s"] is None else f"{r['items_per_s']:,.1f}",
                "" if r["mb_per_s"] is None else f"{r['mb_per_s']:,.1f}",
                "" if r["batches"] is None else str(r["batches"]),
                "" if r["skipped"] is None else str(r["skipped"]),
            )
        console.print(st)
    console.print(f"report: {report.html_path}")


def register(app: typer.Typer) -> None:
    """Add ``tokens``, ``plan`` and ``stats`` to ``app``."""

    @app.command("tokens", epilog=TOKENS_EXAMPLES)
    @config_options(only=TOKENS_OPTIONS)
    def tokens(
        image: Annotated[
            list[str] | None, typer.Option("--image", help="an image as WIDTHxHEIGHT (repeatable)")
        ] = None,
        video: Annotated[
            list[str] | None,
            typer.Option("--video", help="a video as WIDTHxHEIGHT:FRAMES@FPS (repeatable)"),
        ] = None,
        as_json: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
        **options: Any,
    ) -> None:
        """Visual tokens of images and videos of given sizes, as one sample of MODEL (no files needed)."""
        from ...tasks.tokens import media_tokens

        images = [parse_image_size(t) for t in image or []]
        videos = [parse_video(t) for t in video or []]
        if not images and not videos:
            raise typer.BadParameter(
                "give at least one --image WIDTHxHEIGHT or --video WIDTHxHEIGHT:FRAMES@FPS"
            )
        geometry = _tokens_geometry(options)
        try:
            rows = media_tokens(geometry, images, videos)
        except ValueError as exc:  # aspect ratio over the limit, too few frames, a model without video...
            raise typer.BadParameter(str(exc)) from None
        per_image = [row.tokens for row in rows if row.kind == "image"]
        per_video = [row.tokens for row in rows if row.kind == "video"]
        total = sum(per_image) + sum(per_video)
        if as_json:
            _emit_json(
                {
                    "model": geometry.preset.name,
                    "images": per_image,
                    "videos": per_video,
                    "visual_tokens": total,
                }
            )
            return
        _print_token_rows(geometry, rows, total)

    @app.command("plan", epilog=PLAN_EXAMPLES)
    def plan(
        out: Annotated[str, typer.Argument(help="output folder of a run")],
        seq_len: Annotated[int, typer.Option("--seq-len", help="tokens per packed sequence")],
        pad_multiple: Annotated[int, typer.Option(help="round every sample up to a multiple of this")] = 1,
        mix: Annotated[
            bool, typer.Option("--mix", help="pack the subsets together (default: each alone)")
        ] = False,
        subset: Annotated[
            list[str] | None, typer.Option("--subset", help="only this subset (repeatable)")
        ] = None,
        balance: Annotated[
            str, typer.Option(help="none | visual: even the visual-token (encoder) load of each step's packs")
        ] = "none",
        dp: Annotated[int, typer.Option("--dp", help="data-parallel ranks (one pack per rank per step)")] = 8,
        as_json: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
    ) -> None:
        """Pack the ok samples first-fit-decreasing into SEQ_LEN sequences; write the plan manifest."""
        from ...tasks.ops import build_plan

        if seq_len <= 0 or pad_multiple <= 0:
            raise typer.BadParameter("--seq-len and --pad-multiple must be > 0")
        if balance not in ("none", "visual"):
            raise typer.BadParameter(f"--balance must be none or visual, got {balance!r}")
        if dp <= 0:
            raise typer.BadParameter("--dp must be > 0")
        r = build_plan(
            out,
            seq_len,
            pad_multiple=pad_multiple,
            scope="mix" if mix else "subset",
            subsets=subset,
            balance=balance,  # type: ignore[arg-type]
            dp=dp,
        )
        if as_json:
            _emit_json(
                {
                    "out": out,
                    "seq_len": seq_len,
                    "pad_multiple": pad_multiple,
                    "scope": r.scope,
                    "samples": r.samples,
                    "packs": r.packs,
                    "tokens": r.tokens,
                    "too_long": r.too_long,
                    "efficiency": r.efficiency,
                    "padding_waste": r.padding_waste,
                    "tail_waste": r.tail_waste,
                    "groups": [g.__dict__ for g in r.groups],
                    "balance": r.balance.__dict__ if r.balance else None,
                }
            )
            return
        _print_plan(r, out, seq_len, pad_multiple)

    @app.command("stats", epilog=STATS_EXAMPLES)
    def stats(
        out: Annotated[str, typer.Argument(help="output folder of a run")],
        html: Annotated[str | None, typer.Option(help="report path (default OUT/reports/stats.html)")] = None,
        subset: Annotated[
            list[str] | None, typer.Option("--subset", help="only this subset (repeatable)")
        ] = None,
        as_json: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
    ) -> None:
        """Per-subset samples, media and token statistics, plus a self-contained HTML report with plots."""
        from ...tasks.ops import write_stats_report

        report = write_stats_report(out, html, subset)
        if as_json:
            _emit_json(report.to_dict())
            return
        _print_stats(report, out)
