"""Run Megatron-Bridge 0.6.2's real ``QwenVLTaskEncoder`` over published datasets; print what it decides and
feeds, one JSON line per sample. Runs under the Bridge environment's Python 3.12 (:mod:`bridge_env`), never
in the product's venv, and imports nothing of vlmforge.

Usage: ``python bridge_fed_probe.py QWEN_TIKTOKEN MODEL[@LIMIT]=DATASET,... ...`` with MODEL ``qwen2_5_vl``
or ``qwen3_vl``. Per sample: ``encode_sample``'s decision (``ok`` or ``dropped``) and the grids its
``max_visual_tokens`` check computed (``process_vision`` on the sample's media), and with ``@LIMIT`` whether
it skips the sample at ``max_visual_tokens=LIMIT``;
then ``batch([sample])`` (``qwen2_5_collate_fn``, the padded path) and the same batch with
``enable_in_batch_packing=True`` (the packed path): the image / video pad ids in ``input_ids`` per image and
per video, the grids, the sequence length each path gives the sample, and where a cut would fall in it
(after the last visual span's ``<|vision_end|>``; the first token the assistant loss mask marks), and what
``batch()`` does when ``seq_length`` cuts the sample at that first supervised token and one token before it.

Bridge's modules come from the installed wheel with its package ``__init__`` files skipped (they import every
model and, through peft, transformer_engine; the data modules need neither): megatron-core, transformers,
qwen-vl-utils and energon are imported for real. The processors are built in code from the checkpoints'
preprocessor settings (no hub), the tokenizer from the same ``qwen.tiktoken`` vocabulary vlmforge counts
with (transformers' ``TikTokenConverter``, Qwen's split regex, NFC) plus the Qwen special tokens, and a
ChatML chat template equal to vlmforge's renderer (Qwen2.5-VL's default system prompt; none for Qwen3-VL).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import json
import logging
import sys
import warnings
from pathlib import Path
from typing import Any

warnings.filterwarnings("ignore")
logging.disable(logging.WARNING)

QWEN_PAT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# vlmforge's built-in Qwen tokenizer's added tokens, in id order from 151643 (tasks/tokens/text.py)
SPECIALS = [
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
    "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>", "<|vision_end|>",
    "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>", "<tool_call>", "</tool_call>", "<|fim_prefix|>",
    "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>",
    "<tool_response>", "</tool_response>", "<think>", "</think>",
]  # fmt: skip

# QwenVLTaskEncoder's defaults (the bridge-qwen*-vl trainers of vlmforge); the sequence length is left
# unbounded here so that what is counted is the whole sample (truncation is vlmforge's seq_len knob).
ENCODER = dict(
    min_pixels=200704, max_pixels=1003520, max_num_images=10, max_num_frames=60, max_visual_tokens=16384,
    max_padding_length=1 << 20,
)  # fmt: skip


class _ShellPackages(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """``megatron.bridge`` packages found where the wheel installed them, their ``__init__`` not run."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname != "megatron.bridge" and not fullname.startswith("megatron.bridge."):
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.submodule_search_locations is None:
            return spec
        shell = importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        shell.submodule_search_locations = list(spec.submodule_search_locations)
        return shell

    def create_module(self, spec: Any) -> None:
        return None

    def exec_module(self, module: Any) -> None:
        pass


def chat_template(default_system: str | None) -> str:
    system = (
        "{% if loop.first and message['role'] != 'system' %}<|im_start|>system\n"
        + default_system
        + "<|im_end|>\n{% endif %}"
        if default_system
        else ""
    )
    return (
        "{% for message in messages %}" + system + "<|im_start|>{{ message['role'] }}\n"
        "{% if message['content'] is string %}{{ message['content'] }}"
        "{% else %}{% for content in message['content'] %}"
        "{% if content['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
        "{% elif content['type'] == 'video' %}<|vision_start|><|video_pad|><|vision_end|>"
        "{% elif content['type'] == 'text' %}{{ content['text'] }}{% endif %}"
        "{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )


def build_processor(model: str, tiktoken_file: str) -> Any:
    import transformers
    from tokenizers import normalizers
    from transformers.convert_slow_tokenizer import TikTokenConverter

    tok = TikTokenConverter(
        vocab_file=tiktoken_file, pattern=QWEN_PAT, extra_special_tokens=SPECIALS
    ).converted()
    tok.normalizer = normalizers.NFC()
    hf_tok = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>", padding_side="right"
    )
    if model == "qwen2_5_vl":  # Qwen/Qwen2.5-VL-*: preprocessor_config.json
        image = transformers.Qwen2VLImageProcessor(
            patch_size=14, merge_size=2, temporal_patch_size=2, min_pixels=3136, max_pixels=12845056,
            image_mean=[0.48145466, 0.4578275, 0.40821073], image_std=[0.26862954, 0.26130258, 0.27577711],
        )  # fmt: skip
        video = transformers.Qwen2VLVideoProcessor(patch_size=14, merge_size=2, temporal_patch_size=2)
        return transformers.Qwen2_5_VLProcessor(
            image_processor=image, tokenizer=hf_tok, video_processor=video,
            chat_template=chat_template("You are a helpful assistant."),
        )  # fmt: skip
    # Qwen/Qwen3-VL-*: preprocessor_config.json and video_preprocessor_config.json
    image = transformers.Qwen2VLImageProcessor(
        patch_size=16, merge_size=2, temporal_patch_size=2,
        size={"shortest_edge": 65536, "longest_edge": 16777216}, image_mean=[0.5] * 3, image_std=[0.5] * 3,
    )  # fmt: skip
    video = transformers.Qwen3VLVideoProcessor(
        patch_size=16, merge_size=2, temporal_patch_size=2, fps=2, min_frames=4, max_frames=768,
        size={"shortest_edge": 4096, "longest_edge": 25165824}, image_mean=[0.5] * 3, image_std=[0.5] * 3,
    )  # fmt: skip
    return transformers.Qwen3VLProcessor(
        image_processor=image, tokenizer=hf_tok, video_processor=video, chat_template=chat_template(None)
    )


def load(dataset: str) -> list[Any]:
    """Every sample of every split part, through energon and the dataset's own yaml (Bridge's
    ``ChatMLWebdataset``)."""
    import yaml
    from megatron.energon import DefaultTaskEncoder, WorkerConfig, get_loader, get_val_dataset

    out: list[Any] = []
    parts = yaml.safe_load((Path(dataset) / ".nv-meta" / "split.yaml").read_text())["split_parts"]
    for split, shards in parts.items():
        if not shards:
            continue
        wc = WorkerConfig(rank=0, world_size=1, num_workers=0)
        ds = get_val_dataset(
            dataset, split_part=split, worker_config=wc, batch_size=None, task_encoder=DefaultTaskEncoder()
        )
        out.extend(get_loader(ds))
    return out


def runs(ids: list[int], token: int) -> list[int]:
    """Lengths of the maximal runs of ``token`` in ``ids``."""
    out: list[int] = []
    prev = None
    for t in ids:
        if t == token:
            if prev == token:
                out[-1] += 1
            else:
                out.append(1)
        prev = t
    return out


def fed(enc: Any, sample: Any, merge: int) -> dict[str, Any]:
    """What ``batch([sample])`` puts in ``input_ids`` for the sample."""
    batch = enc.batch([sample])
    n = int(batch.attention_mask[0].sum()) if batch.attention_mask is not None else batch.input_ids.shape[1]
    if batch.cu_seqlens_q is not None:  # packed: one sequence, its unpadded length
        n = int(batch.cu_seqlens_q[1] - batch.cu_seqlens_q[0])
    ids = batch.input_ids[0].tolist()[:n]
    vi = batch.visual_inputs
    igrid = [] if vi is None or vi.image_grid_thw is None else vi.image_grid_thw.tolist()
    vgrid = [] if vi is None or vi.video_grid_thw is None else vi.video_grid_thw.tolist()
    image_runs = runs(ids, enc.image_token_id)
    video_pads = ids.count(enc.video_token_id)
    # where a cut at sequence_length would fall: after the <|vision_end|> closing the last visual span, and
    # at the first token the (unshifted) assistant loss mask marks (batch.loss_mask is shifted left by one)
    pads = [k for k, t in enumerate(ids) if t in (enc.image_token_id, enc.video_token_id)]
    vision_end = enc.hf_tokenizer.convert_tokens_to_ids("<|vision_end|>")
    last_visual_end = 0
    if pads:
        last_visual_end = pads[-1] + 2 if pads[-1] + 1 < n and ids[pads[-1] + 1] == vision_end else -1
    marked = [k for k, v in enumerate(batch.loss_mask[0].tolist()[:n]) if v]
    first_supervised = marked[0] + 1 if marked else None
    per_video = [t * h * w // merge**2 for t, h, w in vgrid]
    assert image_runs == [t * h * w // merge**2 for t, h, w in igrid], (image_runs, igrid)
    assert video_pads == sum(per_video), (video_pads, vgrid)
    return {
        "per_image": image_runs,
        "per_video": per_video,
        "image_grid": igrid,
        "video_grid": vgrid,
        "tokens": n,
        "pads": sum(image_runs) + video_pads,
        "last_visual_end": last_visual_end,
        "first_supervised": first_supervised,
    }


def cut(qe: Any, processor: Any, args: dict[str, Any], sample: Any, length: int) -> dict[str, Any]:
    """``batch()`` of the sample by an encoder whose sequence length is ``length`` (the padded path): the
    length it feeds and how many supervised targets survive the cut, or that it raised."""
    enc = qe.QwenVLTaskEncoder(processor.tokenizer, processor, **(args | {"max_padding_length": length}))
    try:
        batch = enc.batch([enc.encode_sample(sample)])
    except ValueError as exc:
        return {"raised": str(exc)[:120]}
    return {"length": int(batch.input_ids.shape[1]), "targets": int(batch.loss_mask.sum())}


def probe(group: int, model: str, tiktoken_file: str, datasets: list[str], limit: int | None) -> None:
    from megatron.bridge.data.conversation_processing import normalize_energon_vlm_sample
    from megatron.bridge.models.qwen_vl.data import energon as qe
    from megatron.energon import SkipSample

    processor = build_processor(model, tiktoken_file)
    patch = 14 if model == "qwen2_5_vl" else 16
    args = dict(ENCODER, patch_size=patch)
    enc = qe.QwenVLTaskEncoder(processor.tokenizer, processor, **args)
    packed = qe.QwenVLTaskEncoder(processor.tokenizer, processor, enable_in_batch_packing=True, **args)
    limited = None
    if limit is not None:  # the same encoder with another max_visual_tokens: which samples it skips
        limited = qe.QwenVLTaskEncoder(
            processor.tokenizer, processor, **(args | {"max_visual_tokens": limit})
        )
    for dataset in datasets:
        for sample in load(dataset):
            row: dict[str, Any] = {"group": group, "model": model, "key": sample.__key__}
            row["dataset"] = Path(dataset).name
            row["conversation"] = sample.conversation  # the published turns, as vlmforge wrote them
            norm = normalize_energon_vlm_sample(sample)
            videos = [v[: ENCODER["max_num_frames"]] for v in norm.videos] if norm.videos else None
            row["n_images"] = len(norm.images or [])
            row["frames"] = [len(v) for v in videos or []]
            row["check_image_grid"], row["check_video_grid"] = [], []
            if norm.images or videos:  # what encode_sample's max_visual_tokens check computes
                pv = qe.process_vision(
                    processor, norm.images, videos, min_pixels=enc.min_pixels, max_pixels=enc.max_pixels
                )
                for k in ("image", "video"):
                    grid = pv[f"{k}_grid_thw"]
                    row[f"check_{k}_grid"] = [] if grid is None else grid.tolist()
            try:
                encoded = enc.encode_sample(sample)
            except SkipSample:
                row["status"] = "dropped"
                print(json.dumps(row), flush=True)
                continue
            row["status"] = "ok"
            row["fed"] = fed(enc, encoded, 2)
            row["fed_packed"] = fed(packed, packed.encode_sample(sample), 2)
            first = row["fed"]["first_supervised"]
            if first is not None and first < row["fed"]["tokens"]:  # a cut at / just before the first target
                row["cut_at"] = {str(n): cut(qe, processor, args, sample, n) for n in (first, first - 1)}
            if limited is not None:
                try:
                    limited.encode_sample(sample)
                    row["skipped_at_limit"] = False
                except SkipSample:
                    row["skipped_at_limit"] = True
            print(json.dumps(row), flush=True)


def main() -> None:
    """``TIKTOKEN MODEL[@LIMIT]=DATASET[,DATASET...] ...``: one process for every model (the imports cost
    most of the time); ``@LIMIT`` also runs ``encode_sample`` with ``max_visual_tokens=LIMIT``."""
    tiktoken_file, *groups = sys.argv[1:]
    sys.meta_path.insert(0, _ShellPackages())
    for i, group in enumerate(groups):
        head, _, paths = group.partition("=")
        model, _, limit = head.partition("@")
        probe(i, model, tiktoken_file, [p for p in paths.split(",") if p], int(limit) if limit else None)


if __name__ == "__main__":
    main()
