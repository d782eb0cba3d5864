"""Subset ``multi_image``: 1 to 12 loose images per sample, one of them 27 MP (must be resized)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final

from .chat import asst, dump, img, txt, user
from .expected import LARGE_IMAGE
from .files import readme, write_files, write_jsonl
from .images import jpeg_bytes, large_coffee, load, png_bytes, thumb

__all__ = ["build"]


_MULTI_SOURCES: Final[list[tuple[str, str]]] = [
    ("astronaut.png", "images/astronaut.jpg"),
    ("chelsea.png", "images/chelsea.jpg"),
    ("coffee.png", "images/coffee.jpg"),
    ("rocket.jpg", "images/rocket.jpg"),
    ("hubble_deep_field.jpg", "images/hubble_deep_field.jpg"),
    ("retina.jpg", "images/retina.jpg"),
    ("motorcycle_left.png", "images/motorcycle_left.jpg"),
    ("grass.png", "images/grass.png"),
    ("brick.png", "images/brick.png"),
    ("camera.png", "images/camera.png"),
    ("text.png", "images/text.png"),
    ("coins.png", "images/coins.png"),
]


def build(root: Path) -> int:
    write_files(root, _files())
    return write_jsonl(root / "multi_image" / "multi_image.jsonl", [dump(r) for r in _rows()])


def _files() -> dict[str, bytes]:
    """The loose images (thumbnails, and the 27 MP one) and the README."""
    files: dict[str, bytes] = {}
    for src, ref in _MULTI_SOURCES:
        im = thumb(load(src))
        files[f"multi_image/{ref}"] = png_bytes(im) if ref.endswith(".png") else jpeg_bytes(im)
    files[f"multi_image/{LARGE_IMAGE[1]}"] = large_coffee()
    files["multi_image/README.md"] = readme(
        "multi_image",
        "Multi-image reasoning (sample)",
        "Questions over 1 to 12 images per sample built from the scikit-image sample data; images are "
        "expected as loose files next to the JSONL.",
        "https://github.com/scikit-image/scikit-image/tree/main/skimage/data",
        ["multi_image/", "  multi_image.jsonl", "  images/*.jpg, images/*.png"],
        "License: Apache-2.0",
    )
    return files


def _rows() -> list[dict[str, Any]]:
    refs = [ref for _, ref in _MULTI_SOURCES]
    twelve: list[Any] = [txt("Here are twelve pictures.")]
    for i, ref in enumerate(refs, start=1):
        twelve += [txt(f"Image {i}:"), img(ref)]
    twelve.append(txt("How many of them are grayscale textures or scans?"))
    return [
        {
            "id": "multi-0001",
            "messages": [
                user(
                    img("images/chelsea.jpg"),
                    img("images/astronaut.jpg"),
                    txt("Which image shows an animal?"),
                ),
                asst([txt("The first image shows a cat.")]),
            ],
        },
        {
            "id": "multi-0002",
            "messages": [
                user(
                    txt("Compare these textures:"),
                    img("images/grass.png"),
                    img("images/brick.png"),
                    img("images/coins.png"),
                    txt("Which one contains round objects?"),
                ),
                asst("The third one: it shows coins."),
            ],
        },
        {
            "id": "multi-0003",
            "messages": [user(*twelve), asst([txt("Five: grass, brick, camera, text, coins.")])],
        },
        {
            "id": "multi-0004",
            "messages": [
                user(img(LARGE_IMAGE[1]), txt("What is on the table?")),
                asst([txt("A cup of coffee on a saucer.")]),
            ],
        },
        {
            "id": "multi-0005",
            "messages": [
                user(img("images/rocket.jpg"), txt("What is this?")),
                asst([txt("A rocket on a launch pad.")]),
                user(txt("And this one?"), img("images/hubble_deep_field.jpg")),
                asst([txt("A deep-field telescope image full of galaxies.")]),
            ],
        },
    ]
