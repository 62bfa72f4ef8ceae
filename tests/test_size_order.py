"""Issue 17, "one name, one order": a size as one tuple is ``(height, width)`` in pixels throughout the
Python API; ``WxH`` text is read by one parser. Expected values are worked out by hand below."""
from __future__ import annotations

import pytest

import dvpipe as dv
from conftest import rig_dict
from dvpipe.errors import ConfigError
from dvpipe.types import parse_wxh


def test_a_1600x900_camera_planned_by_bevformer_tiny_has_height_first_sizes():
    # bevformer-tiny: scale 0.5 -> 800 wide, 450 high; pad to /32 -> 480 high (15 * 32), 800 wide (25 * 32)
    rig = dv.Rig.from_dict(rig_dict([(1600, 900), (1600, 900)]))
    plan = dv.Pipeline.from_profile("bevformer-tiny", rig, backends=("cpu",)).plan
    cp = plan.cameras[0]
    assert cp.spec_in.size == (900, 1600) and (cp.spec_in.width, cp.spec_in.height) == (1600, 900)
    assert cp.prepad_size == (450, 800)
    assert cp.out_size == (480, 800)
    assert plan.out_shape == (2, 3, 480, 800)


def test_resize_and_pad_sizes_come_out_in_the_order_they_go_in():
    rig = dv.Rig.from_dict(rig_dict([(1600, 900)]))
    stages = [dv.Decode(), dv.Resize(size=(256, 704)), dv.Normalise(), dv.Pad(size=(288, 736))]
    cp = dv.Pipeline(rig, stages, backends=("cpu",)).plan.cameras[0]
    assert (cp.prepad_size, cp.out_size) == ((256, 704), (288, 736))
    assert dv.Resize(scale=0.5).out_size((375, 1242)) == (187, 621)  # int(375 / 2), int(1242 / 2)
    assert dv.Pad(size_divisor=32).padded_size((375, 1242)) == (384, 1248)


@pytest.mark.parametrize("text, size", [("1600x900", (900, 1600)), (" 1242X375 ", (375, 1242)),
                                        ("1550x2048", (2048, 1550))])
def test_the_wxh_parser_gives_height_first(text, size):
    assert parse_wxh(text) == size


@pytest.mark.parametrize("text", ["1600", "1600x", "x900", "0x900", "1600x0", "-1600x900", "16.5x9", "axb",
                                  "1600x900x3", "70000x10", ""])
def test_the_wxh_parser_refuses_anything_else_in_one_line(text):
    with pytest.raises(ConfigError, match=r"^--size .*expected WIDTHxHEIGHT") as e:
        parse_wxh(text, "--size")
    assert "\n" not in str(e.value)


def test_yaml_width_height_pairs_arrive_height_first():
    from dvpipe.deploy import load_deployment
    from dvpipe.testing.deployments import synthetic_deployment

    d = synthetic_deployment(1, faults={"CAM0": {"resize": {6: [48, 32]}}})  # YAML: [width, height]
    d["source"]["resolution"] = [80, 40]
    dep = load_deployment(d)
    assert dep.cameras[0].source.faults.resize == ((6, (32, 48)),)
    assert load_deployment(dict(d, cameras=[{"name": "CAM0"}])).cameras[0].source.options["resolution"] == (40, 80)
