"""Source types registered once: a user's source from a file outside the package, the generic
validator over ``Options`` dataclasses, ``live`` from the class, and the reference docs kept equal
to the registry."""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np
import pytest
import yaml

from dvpipe.cli import main as cli_main
from dvpipe.deploy import DeploymentError, Runner, load_deployment
from dvpipe.deploy.config import SourceConfig
from dvpipe.deploy.sources import SOURCES, Source, option, register_source
from dvpipe.deploy.sources.registry import markdown_reference, option_specs
from dvpipe.testing.deployments import tiny_rig
from dvpipe.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]

# A source type as a user writes it: one file, one decorator, nothing in dvpipe changed.
PLUGIN = '''
from dataclasses import dataclass
from typing import Literal, Optional

import cv2
import numpy as np

import dvpipe
from dvpipe.deploy.sources import Source, option


@dvpipe.register_source("ramp")
class Ramp(Source):
    """Flat grey PNG frames, ``step`` grey levels brighter each; frame k at k / fps seconds."""

    @dataclass
    class Options:
        step: int = option(10, "grey levels added per frame", minimum=1, maximum=25)
        frames: int = option(5, "frames before the end", minimum=1, maximum=100)
        fps: float = option(10.0, "frames per second", minimum=0, exclusive_min=True, maximum=1000)
        codec: Literal["png", "jpeg"] = option("png", "how frames are encoded")
        label: Optional[str] = option(None, "a name for reports")

    @classmethod
    def validate(cls, options, ctx):
        if ctx.uri is not None:
            ctx.err("uri", "a ramp source takes no uri")
        if options.codec != ctx.encoding:
            ctx.err("codec", f"{options.codec} frames, but camera {ctx.camera} declares encoding {ctx.encoding}")
        return options

    def _open(self):
        self._k = 0

    def _read(self):
        o = self.options
        if self._k >= o["frames"]:
            return None
        img = np.full((self.camera.height, self.camera.width, 3), o["step"] * self._k, np.uint8)
        ok, data = cv2.imencode("." + o["codec"], img)
        t_ns = 1_700_000_000_000_000_000 + int(round(self._k * 1e9 / o["fps"]))
        self._k += 1
        return self._item(data.tobytes(), t_ns)
'''


def _plugin_deployment(tmp_path: Path, source: dict, **extra) -> Path:
    plugins = tmp_path / "plugins"
    plugins.mkdir(exist_ok=True)
    (plugins / "ramp_source.py").write_text(PLUGIN, encoding="utf-8")
    dep = {"name": "ramp", "plugins": ["plugins/ramp_source.py"], "rig": tiny_rig(2, 32, 16, "png"),
           "pipeline": {"stages": ["decode", {"normalise": {"mean": [0, 0, 0], "std": [1, 1, 1]}}],
                        "backends": ["cpu"]},
           "source": source, "sync": {"tolerance_ms": 10}, "outputs": {"dir": str(tmp_path / "out")}}
    dep.update(extra)
    path = tmp_path / "ramp.yaml"
    path.write_text(yaml.safe_dump(dep), encoding="utf-8")
    return path


def test_a_source_type_from_a_file_outside_the_package_validates_and_runs(tmp_path, capsys):
    path = _plugin_deployment(tmp_path, {"type": "ramp", "step": 20, "frames": 4})
    assert cli_main(["validate", str(path)]) == 0
    assert f"ok: {path}" in capsys.readouterr().out
    assert cli_main(["run", str(path), "-q"]) == 0
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    # frames: 4 in the YAML (not the option's default 5) reaches the source: 4 sets of 2 cameras
    assert summary["totals"]["sets"] == 4 and summary["totals"]["emitted"] == 8 and summary["accounted"]

    # the pixels are the grey levels the YAML asked for: step 20 -> 0, 20, 40, 60 (RGB, normalise 0/1)
    dep = load_deployment(path)
    assert dep.cameras[0].source.options["step"] == 20 and not dep.live
    with Runner(dep, write_outputs=False) as runner:
        levels = [np.unique(np.asarray(rb.batch.images)).tolist() for rb in runner.batches()]
    assert levels == [[0.0], [20.0], [40.0], [60.0]]


@pytest.mark.parametrize("source, key, text", [
    ({"type": "ramp", "stpe": 3}, "source.stpe", "unknown key (did you mean 'step'?); allowed: type, uri, offset_ms, "
                                                 "faults, step, frames, fps, codec, label"),
    ({"type": "ramp", "step": 0}, "source.step", "must be >= 1, got 0"),
    ({"type": "ramp", "step": 2.5}, "source.step", "expected an integer, got 2.5"),
    ({"type": "ramp", "fps": "fast"}, "source.fps", "expected a number, got 'fast'"),
    ({"type": "ramp", "codec": "gif"}, "source.codec", "'gif' is not one of png, jpeg"),
    ({"type": "ramp", "codec": "jpeg"}, "source.codec", "jpeg frames, but camera CAM0 declares encoding png"),
    ({"type": "ramp", "uri": "x"}, "source.uri", "a ramp source takes no uri"),
    ({"type": "ramp", "label": ""}, "source.label", "expected a non-empty string, got ''"),
    ({"type": "rampe"}, "source.type", "'rampe' is not one of images, video, elementary, rtsp, v4l2, synthetic, "
                                       "infos, ramp"),
])
def test_a_user_sources_options_are_validated_with_one_line_errors(tmp_path, capsys, source, key, text):
    path = _plugin_deployment(tmp_path, source)
    assert cli_main(["validate", "--json", str(path)]) == 1
    (result,) = json.loads(capsys.readouterr().out)
    assert [key, text] in result["errors"], result["errors"]
    assert not [k for k, _m in result["errors"] if k.startswith("plugins")]  # each copy of the file imports
    assert all("\n" not in msg for _k, msg in result["errors"])


def test_a_plugin_that_cannot_be_imported_is_a_problem_at_its_key(tmp_path):
    path = _plugin_deployment(tmp_path, {"type": "synthetic"})
    (tmp_path / "plugins" / "broken.py").write_text("raise RuntimeError('no licence')\n", encoding="utf-8")
    d = yaml.safe_load(path.read_text())
    d["plugins"] = ["plugins/broken.py", "plugins/missing.py", "no such module!"]
    path.write_text(yaml.safe_dump(d))
    with pytest.raises(DeploymentError) as e:
        load_deployment(path)
    errors = dict(e.value.errors)
    assert errors["plugins[0]"] == "cannot import plugins/broken.py: RuntimeError: no licence"
    assert errors["plugins[1]"].startswith("file not found: ")
    assert "expected a module name" in errors["plugins[2]"]


# ------------------------------------------------------------------------ registration rules
def test_registration_refuses_a_taken_name_and_options_it_cannot_check():
    class Other(Source):
        pass

    with pytest.raises(ConfigError, match=r"source type 'images' is already registered by "
                                          r"dvpipe\.deploy\.sources\.images\.ImageSequence"):
        register_source("images")(Other)
    with pytest.raises(ConfigError, match="lower-case name"):
        register_source("Bad Name")

    class Listy(Source):
        @dataclass
        class Options:
            sizes: list = option(None, "not a type the validator checks")

    with pytest.raises(TypeError, match="option 'sizes': type .* is not one the validator checks"):
        register_source("listy")(Listy)

    class Clash(Source):
        @dataclass
        class Options:
            uri: Optional[str] = option(None, "every source has one already")

    with pytest.raises(TypeError, match="option 'uri' is a key every source has"):
        register_source("clash")(Clash)
    assert "listy" not in SOURCES and "clash" not in SOURCES


def test_a_required_option_and_null(tmp_path):
    @register_source("needs-level")
    class NeedsLevel(Source):
        @dataclass
        class Options:
            level: int = option(doc="grey level", minimum=0, maximum=255)
            note: Optional[str] = option(None, "free text")

    try:
        base = {"rig": tiny_rig(1), "pipeline": {"profile": "bevformer-tiny"}}
        with pytest.raises(DeploymentError) as e:
            load_deployment(dict(base, source={"type": "needs-level"}), base_dir=tmp_path)
        assert dict(e.value.errors) == {"source.level": "required"}
        with pytest.raises(DeploymentError) as e:
            load_deployment(dict(base, source={"type": "needs-level", "level": None}), base_dir=tmp_path)
        assert dict(e.value.errors) == {"source.level": "expected integer >= 0 and <= 255, got null"}
        dep = load_deployment(dict(base, source={"type": "needs-level", "level": 7, "note": None}), base_dir=tmp_path)
        assert dict(dep.cameras[0].source.options) == {"level": 7, "note": None}
        assert NeedsLevel.type == "needs-level"
    finally:
        SOURCES.pop("needs-level", None)


def test_a_types_check_across_its_cameras_runs_once_the_rest_is_valid(tmp_path):
    @register_source("channel")
    class Channel(Source):
        @dataclass
        class Options:
            channel: int = option(0, "capture card input", minimum=0, maximum=7)

        @classmethod
        def validate_cameras(cls, cameras, ctx):
            seen: dict = {}
            for c in cameras:
                ch = c.source.options["channel"]
                if ch in seen:
                    ctx.err(ctx.rig_key, f"cameras {seen[ch]} and {c.name} share input {ch}")
                seen.setdefault(ch, c.name)

    try:
        d = {"rig": tiny_rig(3), "pipeline": {"profile": "bevformer-tiny"}, "source": {"type": "channel"},
             "cameras": [{"name": "CAM1", "source": {"type": "channel", "channel": 1}}]}
        with pytest.raises(DeploymentError) as e:
            load_deployment(d, base_dir=tmp_path)
        assert e.value.errors == [("rig", "cameras CAM0 and CAM2 share input 0")]
        with pytest.raises(DeploymentError) as e:  # another problem: the check across cameras waits
            load_deployment(dict(d, sync={"on_late": "skip"}), base_dir=tmp_path)
        assert [k for k, _m in e.value.errors] == ["sync.on_late"]
        d["cameras"].append({"name": "CAM2", "source": {"type": "channel", "channel": 2}})
        dep = load_deployment(d, base_dir=tmp_path)
        assert [c.source.options["channel"] for c in dep.cameras] == [0, 1, 2]
    finally:
        SOURCES.pop("channel", None)


def test_live_comes_from_the_class():
    # docs/deployments.md: RTSP and V4L2 capture now; synthetic is live unless realtime: false
    live = {name: SourceConfig(name, None, {}).live for name in ("images", "video", "elementary", "rtsp", "v4l2",
                                                                  "infos")}
    assert live == {"images": False, "video": False, "elementary": False, "rtsp": True, "v4l2": True, "infos": False}
    assert SourceConfig("synthetic", None, {"realtime": True}).live
    assert not SourceConfig("synthetic", None, {"realtime": False}).live
    assert not SourceConfig("no-such-type", None, {}).live


def test_every_numeric_option_of_the_built_in_types_refuses_text(tmp_path):
    """The generic validator covers every declared number of every built-in type, at its key path."""
    cases = 0
    for name in ("images", "video", "elementary", "rtsp", "v4l2", "synthetic", "infos"):
        for spec in option_specs(SOURCES[name]):
            if spec.kind not in ("int", "float"):
                continue
            d = {"rig": tiny_rig(1), "pipeline": {"profile": "bevformer-tiny"},
                 "source": {"type": name, spec.name: "many"}}
            with pytest.raises(DeploymentError) as e:
                load_deployment(d, base_dir=tmp_path)
            msg = dict(e.value.errors)[f"source.{spec.name}"]
            assert (msg.startswith("expected an integer" if spec.kind == "int" else "expected a number")
                    or "0..2**62" in msg), (name, spec.name, msg)
            cases += 1
    assert cases >= 15


# ---------------------------------------------------------------------------- reference docs
def test_docs_source_table_is_the_registry():
    text = (ROOT / "docs" / "deployments.md").read_text(encoding="utf-8")
    m = re.search(r"<!-- source-table:start[^>]*-->\n(.*?)<!-- source-table:end -->", text, re.S)
    assert m, "docs/deployments.md lost its source-table markers"
    builtin = {k: v for k, v in SOURCES.items() if v.__module__.startswith("dvpipe.")}
    saved = dict(SOURCES)
    SOURCES.clear()
    SOURCES.update(builtin)
    try:
        want = markdown_reference()
    finally:
        SOURCES.clear()
        SOURCES.update(saved)
    assert m.group(1) == want, "regenerate the table: python -c 'from dvpipe.deploy.sources.registry import " \
                               "markdown_reference as m; print(m())'"


def test_schema_docstring_lists_each_types_keys():
    import dvpipe.deploy.config as config

    doc = config.__doc__
    section = doc[doc.index("SOURCE (``type`` required"):doc.index("common: offset_ms")]
    entries = dict(re.findall(r"\{type: ([\w-]+), (.*?)\}\n(?=\s*(?:\{type|#|$))", section + "\n", re.S))
    builtin = [k for k, v in SOURCES.items() if v.__module__.startswith("dvpipe.")]
    assert sorted(entries) == sorted(builtin)
    for name, body in entries.items():
        keys = set(re.findall(r"(?:^|[,{]\s*)([a-z_]+):", body))
        specs = option_specs(SOURCES[name])
        want = ({s.name for s in specs} | {n.name for s in specs for n in s.nested}
                | ({"uri"} if SOURCES[name].uri_help else set()))
        assert keys == want, (name, keys ^ want)
