"""Sizes in dvpipe's Python API are (height, width): no constructor takes a positional (width, height) pair
(issue 31). ``Camera`` and ``FrameSpec`` take ``width=`` / ``height=`` by keyword only, so an old positional
call fails loudly instead of swapping the axes; ``aipp_for_stages(stride=...)`` calls its stride function with
``(height, width)`` and reads ``(height_stride, width_stride)`` back. YAML keeps its documented
``[width, height]`` pairs (parsed by ``dvpipe.types.parse_wxh`` / the rig reader into keywords)."""
from __future__ import annotations

import pytest

import dvpipe as dv
from dvpipe.backends.dvpp.aipp import aipp_for_stages
from dvpipe.stages.base import FrameSpec
from dvpipe.types import PixelFormat, Rig


def test_camera_takes_width_and_height_by_keyword_only():
    cam = dv.Camera("C", width=1600, height=900, encoding="jpeg")
    assert (cam.height, cam.width) == (900, 1600)
    with pytest.raises(TypeError):
        dv.Camera("C", 1600, 900, "jpeg")  # the old (width, height) positional form
    with pytest.raises(TypeError):
        dv.Camera("C", 1600, 900)


def test_a_rig_file_keeps_its_width_and_height_keys():
    rig = Rig.from_dict({"cameras": [{"name": "C", "width": 1600, "height": 900}]})
    assert (rig.cameras[0].height, rig.cameras[0].width) == (900, 1600)


def test_frame_spec_takes_width_and_height_by_keyword_only():
    spec = FrameSpec(width=1600, height=900, pixel_format=PixelFormat.BGR)
    assert spec.size == (900, 1600)
    assert str(spec) == "1600x900 bgr/uint8"  # printed as people read sizes, W x H
    with pytest.raises(TypeError):
        FrameSpec(1600, 900, PixelFormat.BGR)  # type: ignore[misc]


def test_aipp_for_stages_calls_its_stride_with_height_then_width():
    asked = []

    def stride(height: int, width: int) -> tuple[int, int]:
        asked.append((height, width))
        return height + 8, width + 38  # (height_stride, width_stride): 458 x 848

    # an even picture: AIPP crops YUV420SP_U8 only to even sizes (aclAippInfo), and VPC writes even NV12 sizes
    stages = [dv.Decode(), dv.Resize(size=(450, 810)),
              dv.Normalise(mean=(123.675, 116.28, 103.53), std=(58.395, 57.12, 57.375), to_rgb=True)]
    cfg = aipp_for_stages(stages, (900, 1600), colour_standard="jpeg_full", stride=stride).config
    assert asked == [(450, 810)]  # the DVPP picture after the resize, (height, width)
    assert (cfg.src_image_size_h, cfg.src_image_size_w) == (458, 848)
    default = aipp_for_stages(stages, (900, 1600), colour_standard="jpeg_full").config
    # default: height up to a multiple of 2 (450 stays), width up to a multiple of 16 (810 -> 816)
    assert (default.src_image_size_h, default.src_image_size_w) == (450, 816)
