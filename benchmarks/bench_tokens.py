"""Token counting and sequence packing, measured against their peers in one run (one process = one core).

    .venv/bin/python benchmarks/bench_tokens.py                      # 100k rows, 7M-sample packing
    .venv/bin/python benchmarks/bench_tokens.py --rows 1000000       # the issue's 1M rows
    .venv/bin/python benchmarks/bench_tokens.py --rows 20000 --pack-samples 500000 --peer-pack 20000

Rows are synthetic chat samples (a user turn with 0-4 images and a question, an assistant answer; 30-400
words) whose image sizes are known, as they are in the ``media`` manifest: no pixel is decoded. Measured:

* visual tokens (Qwen2.5-VL, hub bounds): vlmforge's vectorised ``image_tokens_batch`` and its scalar
  ``image_tokens`` against transformers' own ``Qwen2VLImageProcessorPil.get_number_of_image_patches`` (the
  peer; skipped when transformers is not installed);
* text tokens: the built-in exact Qwen tokenizer on the rendered chat template, alone (the bound);
* whole rows: ``count_sample_tokens`` (template + tokenizer + visual tokens), rows/s on one core;
* packing: vlmforge's ``first_fit_decreasing`` on ``--pack-samples`` lengths (7M by default), and against the
  textbook FFD loop of Megatron-Bridge / NeMo's ``first_fit_decreasing`` (sort, then scan the bins for each
  item) on ``--peer-pack`` lengths, both on the same items (the peer is quadratic: keep it small).

Prints Markdown tables (times are process CPU seconds of this one process).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

_WORDS_TEXT = (
    "the a of and to in is that it for on with as was at by an be this from or which are document chart "
    "table invoice total amount date page figure shows value percent increase year revenue describe image "
    "what how many where who color left right top bottom red blue green number text line column row answer "
    "question"
)
WORDS = tuple(_WORDS_TEXT.split())
SIZES = [
    (1080, 1920),
    (720, 1280),
    (480, 640),
    (768, 1024),
    (1024, 768),
    (2048, 1536),
    (600, 800),
    (224, 224),
]


def make_rows(
    n: int, seed: int, words_range: tuple[int, int] = (30, 400)
) -> tuple[list[list[dict[str, Any]]], list[list[tuple[int, int]]]]:
    rng = np.random.default_rng(seed)
    n_images = rng.choice([0, 1, 1, 1, 1, 1, 1, 2, 3, 4], n)
    words = rng.integers(words_range[0], words_range[1], n)
    vocab = np.array(WORDS)
    rows, sizes = [], []
    for k in range(n):
        picked = vocab[rng.integers(0, len(vocab), int(words[k]))]
        text = " ".join(picked.tolist())
        q, a = text[: len(text) // 4] + "?", text[len(text) // 4 :] + f" {int(rng.integers(0, 10**6))}."
        imgs: list[tuple[int, int]] = []
        for _ in range(int(n_images[k])):
            if rng.random() < 0.5:
                imgs.append(SIZES[int(rng.integers(0, len(SIZES)))])
            else:
                imgs.append((int(rng.integers(200, 3000)), int(rng.integers(200, 3000))))
        content: list[dict[str, Any]] = [{"type": "image"} for _ in imgs] + [{"type": "text", "text": q}]
        rows.append(
            [
                {"role": "user", "content": content},
                {"role": "assistant", "content": [{"type": "text", "text": a}]},
            ]
        )
        sizes.append(imgs)
    return rows, sizes


def cpu(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.process_time()
    out = fn()
    return time.process_time() - t0, out


def textbook_ffd(lengths: list[int], capacity: int) -> list[list[int]]:
    """Megatron-Bridge / NeMo ``first_fit_decreasing``: sort descending, then first fit over a bin list."""
    bins: list[list[int]] = []
    loads: list[int] = []
    for s in sorted(lengths, reverse=True):
        for i, load in enumerate(loads):
            if load + s <= capacity:
                bins[i].append(s)
                loads[i] += s
                break
        else:
            bins.append([s])
            loads.append(s)
    return bins


def pack_lengths(n: int, seed: int) -> np.ndarray:
    """Sample lengths shaped like a VLM SFT mix: text ~ lognormal, plus 0-4 images of 256-2700 tokens."""
    rng = np.random.default_rng(seed)
    text = rng.lognormal(5.3, 0.9, n).astype(np.int64)
    images = rng.choice([0, 1, 1, 1, 2, 4], n) * rng.integers(256, 2700, n)
    return np.clip(text + images, 16, 20_000)


def _count_texts(tok: Any, texts: list[str]) -> list[int]:
    return [tok.count(t) for t in texts]


def _count_rows(preset: Any, bounds: Any, tok: Any, rows: list[Any], sizes: list[Any]) -> list[Any]:
    from vlmforge.tasks.tokens.count import count_sample_tokens

    return [
        count_sample_tokens(r, preset, tok, s, [], bounds=bounds) for r, s in zip(rows, sizes, strict=True)
    ]


def _short(args: argparse.Namespace, render: Callable[..., Any], preset: Any) -> tuple[Any, Any, Any]:
    rows, sizes = make_rows(args.rows, args.seed + 7, (5, 40))
    return rows, sizes, [render(r, preset)[0] for r in rows]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=100_000, help="rows for token counting (issue: 1,000,000)")
    ap.add_argument("--peer-rows", type=int, default=50_000, help="images for the transformers peer")
    ap.add_argument("--pack-samples", type=int, default=7_000_000, help="samples to pack (issue: 7M)")
    ap.add_argument("--peer-pack", type=int, default=30_000, help="samples for the textbook FFD peer")
    ap.add_argument("--seq-len", type=int, default=16_384)
    ap.add_argument("--pad-multiple", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    from vlmforge.schemas.config import TokenOptions
    from vlmforge.tasks.geometry import PixelBounds
    from vlmforge.tasks.geometry.media_tokens import image_tokens, image_tokens_batch
    from vlmforge.tasks.geometry.preset_loading import load_preset
    from vlmforge.tasks.ops.plan.ffd import first_fit_decreasing
    from vlmforge.tasks.tokens.text import TextTokenizer, render_chat

    preset = load_preset("qwen2_5_vl")
    bounds = PixelBounds.of(preset, TokenOptions())  # the hub bounds: no --max-pixels / --min-pixels
    lo, hi = bounds.image_min_pixels, bounds.image_max_pixels
    tok = TextTokenizer.builtin_qwen2()
    tok.count("warm up")
    print(f"generating {args.rows:,} rows ...", file=sys.stderr)
    rows, sizes = make_rows(args.rows, args.seed)
    n_images = sum(len(s) for s in sizes)
    flat_h = np.array([h for s in sizes for h, _ in s], dtype=np.int64)
    flat_w = np.array([w for s in sizes for _, w in s], dtype=np.int64)

    print("\n## Token counting, one core (rows with known image sizes, Qwen2.5-VL)\n")
    print(f"{args.rows:,} rows, {n_images:,} images.\n")
    print("| what | items | CPU s | items/s | rows/s | vs peer |")
    print("|---|---:|---:|---:|---:|---:|")

    t_vec, vec = cpu(lambda: image_tokens_batch(preset, flat_h, flat_w, min_pixels=lo, max_pixels=hi))
    t_sca, sca = cpu(
        lambda: [
            image_tokens(preset, int(h), int(w), min_pixels=lo, max_pixels=hi).tokens
            for h, w in zip(flat_h, flat_w, strict=True)
        ]
    )
    assert vec.tolist() == sca
    peer_rate = None
    try:
        from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

        hf = Qwen2VLImageProcessorPil(min_pixels=lo, max_pixels=hi)
        m = min(args.peer_rows, n_images)
        t_hf, hf_out = cpu(
            lambda: [
                hf.get_number_of_image_patches(int(h), int(w)) // 4
                for h, w in zip(flat_h[:m], flat_w[:m], strict=True)
            ]
        )
        assert hf_out == sca[:m], "transformers disagrees"
        peer_rate = m / t_hf
    except ImportError:
        print("(transformers not installed: no visual-token peer)\n", file=sys.stderr)
    rows_per_image = args.rows / max(n_images, 1)

    def line(what: str, items: int, secs: float, ratio: str) -> None:
        rate = items / secs if secs else math.inf
        row_rate = rate * rows_per_image if "images" in what else rate
        print(f"| {what} | {items:,} | {secs:.2f} | {rate:,.0f} | {row_rate:,.0f} | {ratio} |")

    if peer_rate:
        line("peer: transformers `get_number_of_image_patches` (images)", min(args.peer_rows, n_images),
             min(args.peer_rows, n_images) / peer_rate, "1.00x")  # fmt: skip
    line("visual, `image_tokens_batch` (images)", n_images, t_vec,
         f"{n_images / t_vec / peer_rate:,.0f}x" if peer_rate else "-")  # fmt: skip
    line("visual, scalar `image_tokens` (images)", n_images, t_sca,
         f"{n_images / t_sca / peer_rate:,.1f}x" if peer_rate else "-")  # fmt: skip

    texts = [render_chat(r, preset)[0] for r in rows]
    t_tpl, _ = cpu(lambda: [render_chat(r, preset) for r in rows])
    line("chat template render (rows)", args.rows, t_tpl, "-")
    notes = []
    for label, mix_rows, mix_sizes, mix_texts in (
        ("30-400 words", rows, sizes, texts),
        ("short VQA, 5-40 words", *_short(args, render_chat, preset)),
    ):
        t_tok, counts = cpu(partial(_count_texts, tok, mix_texts))
        t_all, res = cpu(partial(_count_rows, preset, bounds, tok, mix_rows, mix_sizes))
        n_text = sum(counts)
        n = len(mix_rows)
        line(f"{label}: text tokenizer alone, {n_text / n:,.0f} text tokens/row (rows)", n, t_tok, "-")
        line(f"**{label}: whole rows, `count_sample_tokens`** (rows)", n, t_all, "-")
        notes.append(
            f"{label}: tokenizer {n_text / t_tok / 1e6:.2f} M tokens/s, "
            f"{t_tok / t_all:.0%} of whole-row time; "
            f"{sum(r.total_tokens for r in res):,} tokens counted"
        )
    print("\n" + "\n".join(f"- {n}" for n in notes))

    print(f"\n## Packing, first-fit-decreasing, seq_len {args.seq_len:,}, pad multiple {args.pad_multiple}\n")
    print("| what | samples | packs | efficiency | CPU s | samples/s | vs peer |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    pad = args.pad_multiple
    small = -(-pack_lengths(args.peer_pack, args.seed) // pad) * pad
    t_peer, bins = cpu(lambda: textbook_ffd(small.tolist(), args.seq_len))
    t_ours_small, packs_small = cpu(lambda: first_fit_decreasing(small, args.seq_len))
    assert len(bins) == int(packs_small.max()) + 1, "pack counts differ from the textbook FFD"

    def pline(what: str, lens: np.ndarray, n_packs: int, secs: float, ratio: str) -> None:
        eff = lens.sum() / (n_packs * args.seq_len)
        print(
            f"| {what} | {lens.size:,} | {n_packs:,} | {eff:.2%} | {secs:.2f} | "
            f"{lens.size / secs:,.0f} | {ratio} |"
        )

    pline("peer: textbook FFD (Megatron-Bridge / NeMo)", small, len(bins), t_peer, "1.00x")
    pline("vlmforge `first_fit_decreasing`", small, len(bins), t_ours_small, f"{t_peer / t_ours_small:,.0f}x")
    big = -(-pack_lengths(args.pack_samples, args.seed + 1) // pad) * pad
    t_big, packs_big = cpu(lambda: first_fit_decreasing(big, args.seq_len))
    peer_est = t_peer * (args.pack_samples / args.peer_pack) ** 2
    pline(
        "vlmforge `first_fit_decreasing`",
        big,
        int(packs_big.max()) + 1,
        t_big,
        f"~{peer_est / t_big:,.0f}x (peer extrapolated, O(n x packs))",
    )
    big1 = pack_lengths(args.pack_samples, args.seed + 1)
    t_big1, packs_big1 = cpu(lambda: first_fit_decreasing(big1, args.seq_len))
    pline("same, pad multiple 1 (more distinct lengths)", big1, int(packs_big1.max()) + 1, t_big1, "-")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
