"""A video camera's colour standard from its stream's own signalling (issue 26 point 7).

Most HD H.264 cameras signal BT.709 in their VUI. A camera whose rig sets neither ``yuv_matrix`` nor
``yuv_range`` takes the standard its file source signals (read from the header when the deployment's
pipeline is built, before the stream is opened), so the AIPP route's CSC and the host conversion of VDEC's
NV12 use the stream's own matrix; a stream that signals nothing stays BT.601.

Independent references: libx264 streams encoded here with PyAV (one with ``colorspace / color_primaries /
color_trc = bt709`` and its pictures converted to Y'CbCr with swscale's BT.709 matrix, one with neither);
FFmpeg's own ``to_ndarray("bgr24")`` of each decoded frame, checked here to convert with the matrix the frame
signals; the documented AIPP CSC matrices (``CSC_MATRICES``).
"""
from __future__ import annotations

import io

import numpy as np
import pytest

import dvpipe as dv
from dvpipe.backends.dvpp import TOLERANCES
from dvpipe.testing.dvpp import error_stats, synthetic_bgr, tolerance_violations

av = pytest.importorskip("av")
W, H = 320, 240
STAGES = [{"decode": {}}, {"normalise": {"mean": [0, 0, 0], "std": [1, 1, 1], "to_rgb": False}}]  # grey levels, BGR


def _frames(n: int = 3) -> list[np.ndarray]:
    base = synthetic_bgr(W, H, seed=4)
    return [np.roll(base, 6 * i, axis=1) for i in range(n)]


def _mp4(path, bt709: bool) -> None:
    """libx264 in MP4; ``bt709``: the VUI signals BT.709 (matrix, primaries, transfer, limited range) and the
    pictures are converted to Y'CbCr with the BT.709 matrix, as such a camera does."""
    with av.open(str(path), "w", format="mp4") as out:
        s = out.add_stream("libx264", rate=10)
        s.width, s.height, s.pix_fmt = W, H, "yuv420p"
        s.options = {"bf": "0", "g": "5"}
        if bt709:
            cc = s.codec_context
            cc.colorspace, cc.color_primaries, cc.color_trc, cc.color_range = 1, 1, 1, 1
        for img in _frames():
            f = av.VideoFrame.from_ndarray(img, format="bgr24")
            f = f.reformat(format="yuv420p", dst_colorspace="ITU709" if bt709 else "ITU601")
            for pkt in s.encode(f):
                out.mux(pkt)
        for pkt in s.encode():
            out.mux(pkt)


def _ffmpeg_bgr(path) -> list[np.ndarray]:
    """FFmpeg's conversion of each frame (PyAV ``bgr24``), after checking that it uses the signalled matrix."""
    out = []
    with av.open(str(path)) as c:
        for f in c.decode(video=0):
            own = f.to_ndarray(format="bgr24")
            cs = "ITU709" if int(f.colorspace) == 1 else "ITU601"
            assert np.array_equal(own, f.reformat(format="bgr24", src_colorspace=cs).to_ndarray())
            out.append(own)
    return out


@pytest.fixture(scope="module")
def streams(tmp_path_factory):
    d = tmp_path_factory.mktemp("colour")
    _mp4(d / "bt709.mp4", True)
    _mp4(d / "plain.mp4", False)
    return d


def _deployment(uri, backends, extra=None):
    from dvpipe.deploy import load_deployment

    cam = {"name": "V", "width": W, "height": H, "encoding": "h264", **(extra or {})}
    return load_deployment({"name": "colour", "rig": {"cameras": [cam]}, "target": {"soc": "Ascend310P3",
                                                                                  "cann": "7.0.0"},
                            "pipeline": {"stages": STAGES, "backends": list(backends), "fidelity": "fast"},
                            "source": {"type": "video", "uri": str(uri)}})


def _packets(path) -> list:
    """The frames a video source emits for ``path`` (presentation order)."""
    from dvpipe.testing.dvpp import video_packets

    with av.open(str(path)) as c:  # MP4 -> Annex B, as the video source demuxes it
        s = c.streams.video[0]
        buf = io.BytesIO()
        with av.open(buf, "w", format="h264") as o:
            os_ = o.add_stream_from_template(s)
            for pkt in c.demux(s):
                if pkt.dts is None:
                    continue
                pkt.stream = os_
                o.mux(pkt)
    return video_packets(buf.getvalue())


def test_the_signalled_standard_is_read_from_the_header(streams):
    from dvpipe.deploy.sources._probe import stream_colour

    assert stream_colour(str(streams / "bt709.mp4")) == {"yuv_matrix": "bt709", "yuv_range": "limited"}
    assert stream_colour(str(streams / "plain.mp4")) == {}  # VUI unspecified: the run's BT.601 default stays
    assert stream_colour(str(streams / "missing.mp4")) == {}


@pytest.mark.parametrize("name, extra, standard", [
    ("bt709.mp4", None, "bt709_narrow"),
    ("plain.mp4", None, "bt601_narrow"),
    ("bt709.mp4", {"yuv_matrix": "bt601"}, "bt601_narrow"),  # the rig's keys win
])
def test_the_aipp_route_converts_with_the_streams_matrix(streams, name, extra, standard):
    """The plan (made before the stream opens) and ``dvpipe aipp`` take the stream's standard; the model's AIPP
    applied to the VDEC batch gives FFmpeg's own conversion of the same frames within the VDEC tolerance."""
    from dvpipe.backends.dvpp.aipp import AippConfig, apply_aipp, recolour
    from dvpipe.cli import main as cli_main
    from dvpipe.deploy.runner import build_pipeline
    from dvpipe.device import nv12_batch_to_host

    dep = _deployment(streams / name, ("dvpp-sim", "aipp-sim", "cpu"), extra)
    pipe, _notes = build_pipeline(dep)
    try:
        b = pipe.plan.device_batch
        assert pipe.plan.cameras[0].route == "aipp" and b["colour_standard"] == standard
        assert b["aipp"] == recolour(b["aipp"], standard)  # the documented CSC matrix of that standard
        ref = _ffmpeg_bgr(streams / name)
        got = []
        for p in _packets(streams / name):
            batch = pipe.process({"V": p})
            assert batch.valid.all() and not batch.fallbacks and not batch.drops
            got.append(apply_aipp(b["aipp"], nv12_batch_to_host(batch.images))[0].astype(np.float64))
    finally:
        pipe.close()
    assert len(got) == len(ref) == 3
    for k, (g, r) in enumerate(zip(got, ref)):
        stats = error_stats(g.transpose(1, 2, 0), r)
        bad = tolerance_violations(stats, TOLERANCES[("vdec", "synthetic")])
        if extra is None:
            assert not bad, (k, stats)
        else:  # a rig key that contradicts the stream is obeyed, and the colours show it
            assert bad, (k, stats)
    if extra is None:  # dvpipe aipp on the deployment writes the same block
        import yaml

        path = streams / f"{name}.yaml"
        path.write_text(yaml.safe_dump({"name": "colour", "rig": {"cameras": [
            {"name": "V", "width": W, "height": H, "encoding": "h264"}]},
            "target": {"soc": "Ascend310P3", "cann": "7.0.0"}, "pipeline": {"stages": STAGES, "fidelity": "fast"},
            "source": {"type": "video", "uri": str(streams / name)}}))
        cfg = streams / f"{name}.cfg"
        assert cli_main(["aipp", str(path), "-o", str(cfg)]) == 0
        assert AippConfig.from_cfg(cfg.read_text()) == b["aipp"]


@pytest.mark.parametrize("name", ["bt709.mp4", "plain.mp4"])
def test_the_host_route_converts_vdec_output_with_the_streams_matrix(streams, name):
    """VDEC's NV12 downloaded and converted on the host uses the stream's matrix: FFmpeg's own conversion
    within the VDEC tolerance (BT.601 for a BT.709 stream is outside it)."""
    from dvpipe.deploy.runner import build_pipeline

    pipe, _notes = build_pipeline(_deployment(streams / name, ("dvpp-sim", "cpu")))
    try:
        assert pipe.plan.cameras[0].steps[0].backend.name == "dvpp-sim"
        got = [np.array(pipe.process({"V": p}).images[0]) for p in _packets(streams / name)]  # a copy: the ring reuses it
    finally:
        pipe.close()
    for k, (g, r) in enumerate(zip(got, _ffmpeg_bgr(streams / name))):
        stats = error_stats(g.transpose(1, 2, 0), r)
        assert not tolerance_violations(stats, TOLERANCES[("vdec", "synthetic")]), (k, stats)


def test_one_aipp_batch_refuses_cameras_in_different_colour_standards():
    """One AIPP converts the whole batch: a BT.709 camera beside a BT.601 one cannot share it (before, the first
    camera's matrix was applied to both, silently)."""
    from dvpipe.errors import ConfigError

    rig = dv.Rig((dv.Camera("A", width=W, height=H, encoding="h264", extra={"yuv_matrix": "bt709"}),
                  dv.Camera("B", width=W, height=H, encoding="h264")))
    stages = [dv.Decode(), dv.Normalise(mean=(0, 0, 0), std=(1, 1, 1), to_rgb=False)]
    with pytest.raises(ConfigError, match="different colour standards .*A bt709_narrow, B bt601_narrow"):
        dv.Pipeline(rig, stages, backends=("dvpp-sim", "aipp-sim", "cpu"), target=dv.Target("Ascend310P3", "7.0.0"),
                    fidelity="fast")
