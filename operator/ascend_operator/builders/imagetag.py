"""The vllm-ascend version an image's tag names (``<tag>-vllm-ascend-v0.23.0[-a3]``), as the
operator's default images do; pure. Version-aware checks (LoRA, KV transfer) read it."""

from __future__ import annotations

import re

_TAG_VERSION = re.compile(r"vllm-ascend-(v?\d+(?:\.\d+)+(?:rc\d+)?)(?:-|$)")


def image_vllm_ascend(image: str) -> str | None:
    """The vllm-ascend version the image's tag names, or None (a digest, or no such part)."""
    reference = image.split("@", 1)[0]
    last = reference.rsplit("/", 1)[-1]
    if ":" not in last:
        return None
    match = _TAG_VERSION.search(last.split(":", 1)[1])
    return match.group(1) if match else None
