"""Subset ``photo_vqa``: single-image questions; the images ship inside a tar shard of the release."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .chat import asst, dump, img, txt, user
from .files import readme, write_files, write_jsonl, write_tar
from .images import exif_rotated_rocket, jpeg_bytes, load, png_bytes, rgba_astronaut

__all__ = ["build"]


def build(root: Path) -> int:
    sub = root / "photo_vqa"
    write_tar(sub / "media" / "shard_000000.tar", _tar_members())
    write_files(root, {"photo_vqa/README.md": _readme()})
    return write_jsonl(sub / "photo_vqa.jsonl", [dump(r) for r in _rows()])


def _tar_members() -> dict[str, bytes]:
    rocket_exif, _ = exif_rotated_rocket()
    return {
        "images/astronaut.jpg": jpeg_bytes(load("astronaut.png")),
        "images/chelsea.jpg": jpeg_bytes(load("chelsea.png")),
        "images/coffee.jpg": jpeg_bytes(load("coffee.png")),
        "images/rocket.jpg": jpeg_bytes(load("rocket.jpg")),
        "images/hubble_deep_field.jpg": jpeg_bytes(load("hubble_deep_field.jpg")),
        "images/astronaut_rgba.png": png_bytes(rgba_astronaut()),
        "images/rocket_exif6.jpg": rocket_exif,
        "images/page.png": png_bytes(load("page.png")),
        "images/motorcycle_left.jpg": jpeg_bytes(load("motorcycle_left.png")),
        "images/retina.jpg": jpeg_bytes(load("retina.jpg")),
    }


def _rows() -> list[dict[str, Any]]:
    return [
        {
            "id": "photo-0001",
            "messages": [
                {
                    "role": "user",
                    "content": ["What is the person in the picture wearing?", img("images/astronaut.jpg")],
                },
                asst([txt("A white spacesuit with mission patches.")]),
            ],
        },
        {
            "id": "photo-0002",
            "messages": [
                user(img("images/chelsea.jpg"), txt("Which animal is shown? Answer with a single word.")),
                asst([txt("Cat")]),
            ],
        },
        {
            "id": "photo-0003",
            "messages": [
                user(img("images/coffee.jpg"), "What drink is in the cup?"),
                asst("Coffee, served in a cup on a saucer."),
            ],
        },
        {
            "id": "photo-0004",
            "messages": [
                {"role": "system", "content": "You are a careful visual assistant. Answer briefly."},
                user(txt("What kind of vehicle is this?"), img("images/rocket.jpg")),
                asst([txt("A launch vehicle (rocket) on its pad.")]),
            ],
        },
        {
            "id": "photo-0005",
            "messages": [
                user(img("images/hubble_deep_field.jpg"), txt("Are most objects here stars or galaxies?")),
                asst(
                    "<think>The frame is a deep-field exposure; the extended, fuzzy shapes are distant "
                    "galaxies and only a few point sources with diffraction spikes are foreground stars."
                    "</think>Galaxies."
                ),
            ],
        },
        {
            "id": "photo-0006",
            "messages": [
                user(txt("Describe the shape of the visible region."), img("images/astronaut_rgba.png")),
                asst([txt("A soft-edged circle around the astronaut's portrait; the corners are clear.")]),
            ],
        },
        {
            "id": "photo-0007",
            "messages": [
                user(img("images/rocket_exif6.jpg"), txt("Is the rocket standing upright?")),
                asst([txt("Yes, once the EXIF orientation is applied the rocket stands upright.")]),
            ],
        },
        {
            "id": "photo-0008",
            "messages": [
                user("Is this a photo or a scanned text page?", img("images/page.png")),
                asst([txt("A scanned page of text.")]),
            ],
        },
        {
            "id": "photo-0009",
            "messages": [
                user(img("images/motorcycle_left.jpg"), txt("What vehicle is in the image?")),
                asst([txt("A motorcycle.")]),
                user(txt("What colour is it mostly?")),
                asst([txt("Mostly red and black.")]),
            ],
        },
        {
            "id": "photo-0010",
            "messages": [
                user(txt("What kind of medical image is this?"), img("images/retina.jpg")),
                asst([txt("A fundus photograph of the retina.")]),
            ],
        },
    ]


def _readme() -> bytes:
    return readme(
        "photo_vqa",
        "Photo VQA (sample)",
        "Single-image question answering over photos from the scikit-image sample data; the "
        "images are redistributed inside the release as a tar shard.",
        "https://github.com/scikit-image/scikit-image/tree/main/skimage/data",
        [
            "photo_vqa/",
            "  photo_vqa.jsonl",
            "  media/shard_000000.tar   # members images/<name>.jpg|png",
        ],
        "License: CC-BY-4.0",
    )
