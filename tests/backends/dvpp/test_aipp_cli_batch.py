"""``dvpipe aipp DEPLOYMENT.yaml`` writes the config the run hands the model.

The reference is the run itself: ``dvpipe run`` builds its pipeline with
:func:`dvpipe.deploy._assembly.build_pipeline`, whose ``Pipeline`` plans the whole rig as one batch
(``plan_pipeline(rig.cameras, ...)``), and the AIPP route hands the model one ``AippConfig`` for that batch
(``plan.device_batch["aipp"]``). ATC applies one static ``aipp_op`` per model input (``related_input_rank``),
and the batch is one input, so the CLI must write exactly that one block. The run's own frames, converted with
the written block, must fit it (source size = the batch slot's strides, output = the model input) and give the
reference pipeline's input.
"""
from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest

from dvpipe.backends.dvpp.aipp import apply_aipp, parse_cfg_blocks
from dvpipe.cli import main as cli_main

ROOT = Path(__file__).resolve().parents[3]

_STAGES = ("[decode, {resize: {scale: 0.5}}, {normalise: {mean: [123.675, 116.28, 103.53], std: [58.395, 57.12, "
           "57.375], to_rgb: true}}, {pad: {size_divisor: 32}}]")


def _deployment(tmp_path: Path, sizes: dict[str, tuple[int, int]]) -> Path:
    cams = "".join(f"- name: {n}\n  width: {w}\n  height: {h}\n  encoding: jpeg\n" for n, (w, h) in sizes.items())
    (tmp_path / "rig.yaml").write_text(f"name: r\ncameras:\n{cams}")
    for n in sizes:
        (tmp_path / "frames" / n).mkdir(parents=True)
    dep = tmp_path / "dep.yaml"
    dep.write_text("name: d\nrig: rig.yaml\ntarget: {soc: Ascend310P3, cann: \"8.0.0\"}\n"
                   f"pipeline:\n  stages: {_STAGES}\n  fidelity: fast\n  backends: [dvpp-sim, aipp-sim, cpu]\n"
                   "source:\n  type: images\n  uri: frames/{camera}\n")
    return dep


def _frames(sizes: dict[str, tuple[int, int]]) -> dict[str, bytes]:
    rng = np.random.default_rng(7)
    out = {}
    for n, (w, h) in sizes.items():
        img = cv2.resize(rng.integers(0, 256, (h // 50, w // 50, 3), dtype=np.uint8), (w, h),
                         interpolation=cv2.INTER_CUBIC)
        out[n] = cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, 95])[1].tobytes()
    return out


def _run_and_cli(tmp_path: Path, sizes: dict[str, tuple[int, int]]):
    """(the CLI's blocks, its printed report, the run's device batch, the run's NV12 batch on the host, the
    reference pipeline's output) for one frame set."""
    import dvpipe as dv
    from dvpipe.deploy import load_deployment
    from dvpipe.deploy._assembly import build_pipeline
    from dvpipe.device import nv12_batch_to_host

    dep = _deployment(tmp_path, sizes)
    out = tmp_path / "aipp.cfg"
    assert cli_main(["aipp", str(dep), "-o", str(out)]) == 0
    blocks = parse_cfg_blocks(out.read_text())
    d = load_deployment(dep)
    frames = _frames(sizes)
    pipe, _notes = build_pipeline(d)  # what `dvpipe run` builds
    try:
        b = pipe.plan.device_batch
        assert b is not None and pipe.plan.cameras[-1].route == "aipp"
        host = nv12_batch_to_host(pipe.process(frames).images)
    finally:
        pipe.close()
    with dv.Pipeline(d.rig, list(d.pipeline.stages), ("reference",)) as ref_pipe:
        ref = np.asarray(ref_pipe.process(frames).images, np.float64)
    return blocks, b, host, ref


def test_two_sizes_give_the_one_config_of_the_runs_batch(tmp_path, capsys):
    # 1600x900 and 1600x920 on Ascend310P3: DVPP pictures 800x450 and 800x460, padded to one 800x480 model input
    blocks, b, host, ref = _run_and_cli(tmp_path, {"CAM_A": (1600, 900), "CAM_B": (1600, 920)})
    printed = capsys.readouterr().out
    assert len(blocks) == 1, [(c.related_input_rank, c.src_image_size_w, c.src_image_size_h) for c in blocks]
    (cfg,) = blocks
    assert cfg == b["aipp"]  # field for field (AippConfig equality), related_input_rank 0 included
    assert cfg.related_input_rank == 0
    # the model input it implies is the run's batch slot
    assert (cfg.src_image_size_w, cfg.src_image_size_h) == tuple(b["strides"])
    assert cfg.output_hw == tuple(b["out_size"]) == (b["height"], b["width"]) == (480, 800)
    ws, hs = b["strides"]
    assert host.shape == (2, hs * 3 // 2, ws)
    # the run's own pictures through the written block: the reference pipeline's input (the canvas route's
    # published deviation, docs/dvpp.md: content mean 0.58, p99 2.0; pad rows max 0.72)
    got = apply_aipp(cfg, host).astype(np.float64)
    assert got.shape == ref.shape == (2, 3, 480, 800)
    for k, h in enumerate((450, 460)):
        content, pad = np.abs(got[k, :, :h] - ref[k, :, :h]), np.abs(got[k, :, h:] - ref[k, :, h:])
        assert content.mean() < 0.7 and np.percentile(content, 99) <= 2.5, (k, content.mean())
        assert pad.max() < 0.75, (k, pad.max())
    assert "CAM_A, CAM_B" in printed and "canvas slot: VPC pastes the 800x460 DVPP picture" in printed


def test_one_size_still_gives_the_plain_aipp_block(tmp_path):
    # every camera 1600x900: pictures 800x450, AIPP pads 30 rows (within its limits): no canvas
    blocks, b, host, ref = _run_and_cli(tmp_path, {"CAM_A": (1600, 900), "CAM_B": (1600, 900)})
    (cfg,) = blocks
    assert "canvas" not in b and cfg == b["aipp"]
    assert (cfg.src_image_size_w, cfg.src_image_size_h, cfg.padding, cfg.bottom_padding_size) == (800, 450, True, 30)
    assert (cfg.src_image_size_w, cfg.src_image_size_h) == tuple(b["strides"]) and cfg.output_hw == (480, 800)
    got = apply_aipp(cfg, host).astype(np.float64)
    err = np.abs(got[:, :, :450] - ref[:, :, :450])
    assert got.shape == ref.shape and err.mean() < 0.7 and np.percentile(err, 99) <= 2.5


def test_sample_deployment_file_is_unchanged_by_joint_planning(tmp_path):
    """The six identical cameras of the bundled sample: planned together or one by one, one identical block; the
    file is the run's batch config (the bevformer-tiny values test_aipp.py::test_cli_sample_deployment checks)."""
    import dvpipe as dv
    from dvpipe.deploy import load_deployment
    from dvpipe.knowledge import latest_checked

    out = tmp_path / "aipp.cfg"
    assert cli_main(["aipp", str(ROOT / "samples" / "deployment.yaml"), "-o", str(out), "--soc", "Ascend310P3"]) == 0
    (cfg,) = parse_cfg_blocks(out.read_text())
    d = load_deployment(ROOT / "samples" / "deployment.yaml")
    with dv.Pipeline.from_profile("bevformer-tiny", d.rig, ("dvpp-sim", "aipp-sim", "cpu"), fidelity="fast",
                                  target=dv.Target("Ascend310P3", str(latest_checked()))) as pipe:
        assert cfg == pipe.plan.device_batch["aipp"]


@pytest.mark.parametrize("sizes", [{"A": (1600, 900), "B": (1280, 720)}])
def test_a_rig_the_run_cannot_batch_is_refused_in_one_line(tmp_path, capsys, sizes):
    # 800x480 and 640x384: the run refuses the batch (one size), so there is no config to write
    dep = _deployment(tmp_path, sizes)
    out = tmp_path / "aipp.cfg"
    assert cli_main(["aipp", str(dep), "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "a batch needs one size" in err and not out.exists()


# -- colour standard: the rig keys as the run reads them -------------------------------------------------------
@pytest.mark.parametrize("extra", [{"yuv_matrix": "bt709", "yuv_range": "Full"},
                                   {"yuv_matrix": "BT709", "yuv_range": "full"},
                                   {"yuv_matrix": "Bt601"}, {"yuv_range": "FULL"}])
def test_rig_colour_keys_are_read_as_the_run_reads_them(tmp_path, capsys, extra):
    """The run's colour standard is camera_colour_standard (case-insensitive keys); the CLI's must be the same, and
    the written block the run's batch config (no 'differs from the run's slot standard' note, no crash)."""
    import dvpipe as dv
    from dvpipe.backends.dvpp.aipp import recolour
    from dvpipe.backends.dvpp.colour import camera_colour_standard
    from dvpipe.cli.aipp import _camera_standard
    from dvpipe.deploy import load_deployment
    from dvpipe.deploy._assembly import build_pipeline

    cam = dv.Camera("C", width=1600, height=900, encoding="h264", extra=dict(extra))
    assert _camera_standard(cam) == camera_colour_standard(cam)
    keys = "".join(f"  {k}: {v}\n" for k, v in extra.items())
    (tmp_path / "rig.yaml").write_text(f"name: r\ncameras:\n- name: C\n  width: 1600\n  height: 900\n  encoding: h264\n"
                                       f"{keys}")
    dep = tmp_path / "dep.yaml"
    dep.write_text("name: d\nrig: rig.yaml\ntarget: {soc: Ascend310P3, cann: \"8.0.0\"}\npipeline:\n"
                   "  profile: bevformer-tiny\n  fidelity: fast\n  backends: [dvpp-sim, aipp-sim, cpu]\n"
                   "source:\n  type: rtsp\n  uri: rtsp://127.0.0.1:8554/{camera}\n")
    out = tmp_path / "aipp.cfg"
    assert cli_main(["aipp", str(dep), "-o", str(out)]) == 0, capsys.readouterr().err
    printed = capsys.readouterr().out
    (cfg,) = parse_cfg_blocks(out.read_text())
    pipe, _ = build_pipeline(load_deployment(dep))
    try:
        b = pipe.plan.device_batch
        run_standard = camera_colour_standard(pipe.plan.cameras[0].camera)
        assert b["colour_standard"] == run_standard and cfg == b["aipp"]
        assert recolour(cfg, run_standard) == cfg
    finally:
        pipe.close()
    assert "differs from the run's slot standard" not in printed


@pytest.mark.parametrize("flag", [["--size", "100x100"], ["--source", "h264"]])
def test_profile_only_flags_with_a_deployment_are_refused_not_ignored(tmp_path, capsys, flag):
    """--size and --source describe the camera of --profile; a deployment's cameras give their own (the flag was
    ignored and the config written for the deployment's size)."""
    from dvpipe.cli.run import SAMPLE as sample  # the bundled sample deployment

    assert cli_main(["aipp", str(sample), "--soc", "Ascend310P3", "-o", str(tmp_path / "a.cfg"), *flag]) == 2
    assert f"{flag[0]} goes with --profile" in capsys.readouterr().err and not (tmp_path / "a.cfg").exists()
