"""The errors a user meets from the knowledge data, the stride table, the synthetic sources, device tensors and
the live probe are ``DvpipeError``s that keep their builtin meaning (``ConfigError`` is a ``ValueError``) and
say, in one line, what to do."""
from __future__ import annotations

import numpy as np
import pytest

from conftest import rule_yaml
from dvpipe.errors import ConfigError, DvpipeError

def _one_line(e: BaseException) -> str:
    msg = str(e)
    assert "\n" not in msg, msg
    return msg


def test_a_bad_rule_file_raises_a_config_error_naming_file_and_rule(tmp_path):
    from dvpipe import knowledge as kb

    path = tmp_path / "rules_extra.yaml"
    path.write_text(rule_yaml("test.bad", "    on_fail: maybe"), encoding="utf-8")
    with kb.extra_data(tmp_path), pytest.raises(ConfigError) as e:
        kb.rules()
    assert e.value.path == f"{path}: rule test.bad"
    assert _one_line(e.value) == f"{path}: rule test.bad: on_fail must be reject or unknown"


def test_a_duplicate_rule_id_says_to_rename_it(tmp_path):
    from dvpipe import knowledge as kb

    # vpc.v1.range.310_910 is a shipped rule (rules_vpc.yaml)
    path = tmp_path / "rules_extra.yaml"
    path.write_text(rule_yaml("vpc.v1.range.310_910", "    check: {in_w: [10, 4096]}"), encoding="utf-8")
    with kb.extra_data(tmp_path), pytest.raises(ConfigError) as e:
        kb.rules()
    msg = _one_line(e.value)
    assert e.value.path == str(path)
    assert msg.startswith(f"{path}: duplicate rule id vpc.v1.range.310_910") and "give the rule another id" in msg


def test_a_duplicate_open_question_says_to_rename_it(tmp_path):
    from dvpipe import knowledge as kb

    # q1 is a shipped open question (open_questions.yaml)
    (tmp_path / "open_questions.yaml").write_text('schema_version: 1\nopen_questions:\n  q1: "again"\n',
                                                  encoding="utf-8")
    with kb.extra_data(tmp_path), pytest.raises(ConfigError) as e:
        kb.open_questions()
    msg = _one_line(e.value)
    assert "open question q1 is already defined" in msg and "give it another key" in msg


def test_a_condition_key_declared_twice_is_a_config_error():
    from dvpipe.knowledge.checks import CHECKS, SELECTORS, declare_check, declare_selector

    selector, check = next(iter(SELECTORS)), next(iter(CHECKS))
    before = (dict(SELECTORS), dict(CHECKS))
    with pytest.raises(ConfigError, match=f"selector '{selector}' declared twice: give the new selector another key"):
        declare_selector(selector, "again")(lambda value, request: True)
    with pytest.raises(ConfigError, match=f"check '{check}' declared twice"):
        declare_check(check, "again")(lambda value, chk, request, strict: ())
    assert (SELECTORS, CHECKS) == before  # nothing replaced


def test_stride_for_refuses_malformed_arguments_with_config_errors():
    from dvpipe.knowledge import stride_for

    with pytest.raises(ConfigError, match="give side='in'"):
        stride_for("Ascend310", "8.0.0", "jpegd", "nv12", 1242, 375, side="up")
    with pytest.raises(ConfigError, match="give soc="):
        stride_for(None, "8.0.0", "jpegd", "nv12", 1242, 375)


def test_a_knowledge_gap_is_in_the_family_and_still_a_lookup_error():
    """JPEGD strides on Atlas A3 are not documented (tests/knowledge/test_knowledge.py): the gap is caught by
    ``except DvpipeError`` (the probe's and the validator's) as well as ``except LookupError``."""
    from dvpipe.knowledge import KnowledgeGap, stride_for

    for catch in (DvpipeError, LookupError):
        with pytest.raises(catch) as e:
            stride_for("Ascend910_9391", "9.0.0", "jpegd", "nv12", 1242, 375)
        assert isinstance(e.value, KnowledgeGap)


def test_encode_raw_yuv_refuses_a_wrong_encoding_or_picture():
    from dvpipe.deploy.sources.synthetic import encode_raw_yuv

    with pytest.raises(ConfigError, match="'h264' is not a raw YUV encoding; give one of "):
        encode_raw_yuv(np.zeros((4, 4, 3), np.uint8), "h264")
    with pytest.raises(ConfigError, match="HxWx3 uint8 BGR picture, got float32"):
        encode_raw_yuv(np.zeros((4, 4, 3), np.float32), "nv12")


def test_a_source_option_with_a_bad_path_kind_is_a_config_error():
    from dvpipe.deploy.sources.registry import option

    with pytest.raises(ConfigError, match="option\\(path=...\\) takes 'file' or 'dir'"):
        option("", doc="a file", path="folder")


def test_a_path_shorthand_of_the_wrong_kind_is_a_config_error():
    from dvpipe.deploy._builtin_exporters import TraceExporter

    with pytest.raises(ConfigError, match="expected true, false or a path, got 5"):
        TraceExporter.shorthand(5)


def test_a_device_tensor_without_runtime_says_how_to_read_it():
    from dvpipe.device import DeviceTensor

    t = DeviceTensor(ptr=0, nbytes=12, shape=(1, 2, 4), dtype="uint8", layout="NV12", placement="dvpp-sim:0")
    with pytest.raises(ConfigError, match="construct it with runtime="):
        t.to_host()


def test_the_live_probe_refuses_an_encoding_it_cannot_synthesise():
    from dvpipe.probe.live import synthetic_frame
    from dvpipe.types import Camera

    cam = Camera("CAM", width=64, height=48, encoding="jpeg", extra={"bitstream": "webp"})
    with pytest.raises(ConfigError, match="no synthetic frame for encoding 'webp'.*without --live"):
        synthetic_frame(cam)


def test_verifying_a_step_without_a_target_says_to_plan_with_one(tmp_path):
    """The live cache keys results by target: a query planned without one is refused in one line (it used
    to run the kernel and fail on ``None.soc`` while recording)."""
    import dvpipe as dv
    from dvpipe.planner import plan_pipeline
    from dvpipe.probe.live import LiveCache, verify_step
    from dvpipe.stages.kernel_registry import KernelQuery

    cam = dv.Camera("CAM", width=64, height=48)
    step = plan_pipeline([cam], [dv.Decode()], ["cpu"]).cameras[0].steps[0]  # planned without a target
    query = KernelQuery(step.stages, step.spec_in, (step.spec_out,), cam, step.backend, "fast")
    kernel = step.kernel
    with pytest.raises(ConfigError, match="planned for a target: plan with target=dvpipe.Target"):
        verify_step(kernel, query, LiveCache.load(str(tmp_path / "live.json")))
