"""Exporters own their options (issue 31): ``outputs:`` is ``{dir, metrics, <exporter>: options}``, the
runner takes options per exporter, ``dvpipe run``'s flags come from the exporter table, and an
exporter with a short YAML form and a CLI flag is one file.

The exporter below is declared here, in the tests' own module, and touches no file of the package:
it writes how many frame sets it saw (and every ``every``-th set's index) to a text file. What it
wrote is checked against what the run says independently: ``summary.json``'s set count and the
``--frames`` asked for."""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

import dvpipe
from dvpipe.cli import main as cli_main
from dvpipe.deploy import Runner, load_deployment
from dvpipe.deploy.config import DeploymentError
from dvpipe.deploy.exporters import EXPORTERS, CliFlag, Exporter, markdown_reference, option, register_exporter
from dvpipe.testing.deployments import synthetic_deployment
from dvpipe.errors import ConfigError


class SetCount(Exporter):
    """The number of frame sets, and the index of every ``every``-th one, as text."""

    @dataclass
    class Options:
        path: str = option("sets.txt", "the file (relative to outputs.dir); `set_count: PATH` is short for it")
        every: int = option(1, "list every N-th set's index", minimum=1, maximum=1000)

    flag = CliFlag("--set-count", "PATH", "write the number of frame sets to PATH")

    @staticmethod
    def shorthand(value):
        if value is False or value is None:
            return None
        return {"path": value} if isinstance(value, str) else ({} if value is True else value)

    @staticmethod
    def from_flag(value):
        return {"path": os.path.abspath(value)}

    @staticmethod
    def output_folders(options):
        return (os.path.dirname(options["path"]) or ".",)

    def open(self, run):
        self.path = run.output_path(self.options["path"])
        self.seen: list[int] = []

    def observe(self, result):
        self.seen.append(result.index)

    def close(self, result):
        listed = [i for i in self.seen if i % self.options["every"] == 0]
        Path(self.path).write_text(f"{len(self.seen)}\n{' '.join(map(str, listed))}\n", encoding="utf-8")
        return {"set_count": self.path}


@pytest.fixture
def set_count():
    register_exporter("set_count")(SetCount)
    try:
        yield SetCount
    finally:
        del EXPORTERS["set_count"]


def _yaml(tmp_path: Path, outputs: dict, frames: int = 5) -> str:
    d = synthetic_deployment(1, frames=frames, outputs=dict({"dir": str(tmp_path / "out"), "metrics": True},
                                                            **outputs))
    path = tmp_path / "dep.yaml"
    path.write_text(yaml.safe_dump(d), encoding="utf-8")
    return str(path)


def _read(path: Path) -> tuple[int, list[int]]:
    count, listed = path.read_text(encoding="utf-8").split("\n")[:2]
    return int(count), [int(x) for x in listed.split()]


def test_the_exporter_is_declared_outside_the_package(set_count):
    package = Path(dvpipe.__file__).parent
    assert not any("set_count" in p.read_text(encoding="utf-8") or "--set-count" in p.read_text(encoding="utf-8")
                   for p in package.rglob("*.py"))
    assert SetCount.__module__ == __name__


def test_its_short_form_and_mapping_form_are_read_by_the_generic_validator(tmp_path, set_count):
    dep = load_deployment(_yaml(tmp_path, {"set_count": "n.txt"}))
    assert dict(dep.outputs.exporters["set_count"]) == {"path": "n.txt", "every": 1}
    dep = load_deployment(_yaml(tmp_path, {"set_count": True}))
    assert dict(dep.outputs.exporters["set_count"]) == {"path": "sets.txt", "every": 1}
    assert "set_count" not in load_deployment(_yaml(tmp_path, {"set_count": False})).outputs.exporters
    with pytest.raises(DeploymentError, match=r"outputs.set_count.every: must be >= 1, got 0"):
        load_deployment(_yaml(tmp_path, {"set_count": {"every": 0}}))


def test_its_short_form_runs_and_writes_what_the_run_counted(tmp_path, set_count):
    path = _yaml(tmp_path, {"set_count": "n.txt"}, frames=5)
    assert cli_main(["run", path, "-q"]) == 0
    out = tmp_path / "out"
    sets = json.loads((out / "summary.json").read_text())["sets"]
    assert sets == 5 and _read(out / "n.txt") == (5, [0, 1, 2, 3, 4])


def test_its_flag_comes_from_the_exporter_table_and_merges_over_the_yaml(tmp_path, set_count, capsys):
    with pytest.raises(SystemExit):
        cli_main(["run", "--help"])
    assert "--set-count PATH" in capsys.readouterr().out
    path = _yaml(tmp_path, {"set_count": {"every": 2}}, frames=7)
    target = tmp_path / "elsewhere" / "count.txt"  # the flag's path: relative to the working directory
    assert cli_main(["run", path, "--frames", "6", "--set-count", os.path.relpath(target), "-q"]) == 0
    # --frames 6 asked for six sets; `every: 2` from the YAML still applies under the flag's path
    assert _read(target) == (6, [0, 2, 4])
    assert not (tmp_path / "out" / "sets.txt").exists()


def test_a_flag_folder_that_cannot_be_created_is_named_before_the_run(tmp_path, set_count, capsys):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    assert cli_main(["run", _yaml(tmp_path, {}), "--set-count", str(blocker / "x" / "n.txt"), "-q"]) == 2
    err = capsys.readouterr().err
    assert f"--set-count {blocker / 'x' / 'n.txt'}: cannot create " in err and f"{blocker} is a file" in err


def test_the_reference_table_lists_its_key_and_flag(set_count):
    text = markdown_reference()
    assert "| `set_count` | `outputs.set_count`, `--set-count PATH` |" in text
    assert "| `outputs.set_count.every` | integer >= 1 and <= 1000 | 1 |" in text


def test_a_flag_taken_by_another_exporter_is_refused():
    class Clash(Exporter):
        flag = CliFlag("--trace", "PATH", "x")

    with pytest.raises(ConfigError, match="the flag --trace is taken by exporter 'trace'; choose another flag"):
        register_exporter("clash_for_test")(Clash)
    assert "clash_for_test" not in EXPORTERS
    with pytest.raises(ConfigError, match="an exporter's flag is '--' and lower-case words"):
        CliFlag("-x", "PATH", "x")


def test_an_exporter_with_a_hook_that_is_no_longer_called_is_refused_at_registration():
    class Old(Exporter):
        @classmethod
        def enabled(cls, outputs, overrides):
            return {}

    with pytest.raises(TypeError, match=r"Old.enabled\(\) is no longer called; say when the exporter runs unnamed "
                                        r"with implied\(outputs\)"):
        register_exporter("old_for_test")(Old)
    assert "old_for_test" not in EXPORTERS


# -- the runner takes options per exporter ---------------------------------------------------------------
def _dep(tmp_path: Path, **outputs):
    return load_deployment(synthetic_deployment(1, frames=4, outputs=dict({"dir": str(tmp_path), "metrics": False},
                                                                          **outputs)))


def _ring(path: Path) -> dict:
    return json.loads(path.read_text())["otherData"]["ring"]


def test_runner_options_merge_over_the_deployments_per_exporter(tmp_path):
    dep = _dep(tmp_path, trace="t.json")
    result = Runner(dep, outputs={"trace": {"max_events": 7}}).run()
    assert result.outputs["trace"] == str(tmp_path / "t.json")  # the deployment's path kept
    assert _ring(tmp_path / "t.json")["max_events"] == 7
    assert "trace" not in Runner(dep, outputs={"trace": False}, write_outputs=False).exporters
    # an exporter the deployment leaves off: the runner's options turn it on, defaults filled in
    result = Runner(_dep(tmp_path / "b"), outputs={"report": True, "dumps": {"max": 1}}).run()
    assert Path(result.outputs["report"]) == tmp_path / "b" / "report.html"
    assert sorted(p.name for p in (tmp_path / "b" / "dumps").iterdir()) == ["set_000000.json", "set_000000.npz"]


@pytest.mark.parametrize("given, problem", [
    ({"trace": {"max_events": 0}}, "outputs.trace.max_events: must be >= 1, got 0"),
    ({"trace": {"colour": 1}}, "outputs.trace.colour: unknown key; allowed: path, max_events"),
    ({"no_such": {}}, "outputs.no_such: unknown exporter; known: summary, latency, trace"),
    ({"trace": 5}, "outputs.trace: expected true, false or a path, got 5"),
])
def test_runner_options_are_checked_like_the_yaml(tmp_path, given, problem):
    with pytest.raises(ConfigError) as e:
        Runner(_dep(tmp_path), outputs=given, write_outputs=False)
    assert problem in str(e.value) and "\n" not in str(e.value)


def test_the_old_runner_keywords_are_gone():
    with pytest.raises(TypeError):
        Runner(load_deployment(synthetic_deployment(1, frames=1)), trace_path="t.json")  # type: ignore[call-arg]


# -- existing deployments load unchanged ---------------------------------------------------------------
def test_trace_max_events_is_still_read_as_the_traces_max_events(tmp_path):
    dep = _dep(tmp_path, trace=True, trace_max_events=9)
    assert dict(dep.outputs.exporters["trace"]) == {"path": "trace.json", "max_events": 9}
    Runner(dep).run()
    assert _ring(tmp_path / "trace.json")["max_events"] == 9
    with pytest.raises(DeploymentError, match=r"outputs.trace_max_events: must be >= 1, got 0"):
        _dep(tmp_path, trace=True, trace_max_events=0)
    with pytest.raises(DeploymentError, match=r"outputs.trace_max_events: given twice \(also outputs.trace."
                                              r"max_events\); keep outputs.trace.max_events"):
        _dep(tmp_path, trace={"max_events": 3}, trace_max_events=9)
    assert _dep(tmp_path, trace=True, trace_max_events=None).outputs.exporters["trace"]["max_events"] == 50_000


def test_trace_max_events_without_trace_applies_when_the_flag_turns_the_trace_on(tmp_path):
    d = synthetic_deployment(1, frames=3, outputs={"dir": str(tmp_path / "out"), "metrics": False,
                                                   "trace_max_events": 11})
    path = tmp_path / "dep.yaml"
    path.write_text(yaml.safe_dump(d), encoding="utf-8")
    assert "trace" not in load_deployment(str(path)).outputs.exporters
    assert cli_main(["run", str(path), "--trace", str(tmp_path / "t.json"), "-q"]) == 0
    assert _ring(tmp_path / "t.json")["max_events"] == 11


def test_out_moves_the_outputs_relative_paths_and_keeps_absolute_ones(tmp_path):
    d = synthetic_deployment(1, frames=3, outputs={"dir": str(tmp_path / "out"), "metrics": True, "trace": "t.json",
                                                   "plots": False, "report": str(tmp_path / "abs" / "r.html")})
    path = tmp_path / "dep.yaml"
    path.write_text(yaml.safe_dump(d), encoding="utf-8")
    assert cli_main(["run", str(path), "--out", str(tmp_path / "other"), "-q"]) == 0
    assert sorted(p.name for p in (tmp_path / "other").iterdir()) == ["latency.json", "summary.json", "t.json"]
    assert (tmp_path / "abs" / "r.html").is_file() and not (tmp_path / "out").exists()


PLUGIN = '''
import os
from dataclasses import dataclass
from pathlib import Path

from dvpipe.deploy.exporters import CliFlag, Exporter, option, register_exporter


@register_exporter("plugin_count")
class PluginCount(Exporter):
    """The number of frame sets as text."""

    @dataclass
    class Options:
        path: str = option("count.txt", "the file (relative to outputs.dir)")

    flag = CliFlag("--plugin-count", "PATH", "write the number of frame sets to PATH")

    @staticmethod
    def from_flag(value):
        return {"path": os.path.abspath(value)}

    def open(self, run):
        self.path, self.n = run.output_path(self.options["path"]), 0

    def observe(self, result):
        self.n += 1

    def close(self, result):
        Path(self.path).write_text(str(self.n))
        return {"plugin_count": self.path}
'''


def _plugin_deployment(folder: Path, plugin: str = PLUGIN) -> Path:
    """A one-camera deployment in ``folder`` whose ``plugins:`` is the file ``count_plugin.py`` holding ``plugin``."""
    (folder / "count_plugin.py").write_text(plugin, encoding="utf-8")
    d = synthetic_deployment(1, frames=4, outputs={"dir": str(folder / "out"), "metrics": False})
    d["plugins"] = ["count_plugin.py"]
    path = folder / "dep.yaml"
    path.write_text(yaml.safe_dump(d), encoding="utf-8")
    return path


def test_the_flag_of_an_exporter_from_the_deployments_plugins_file(tmp_path):
    path = _plugin_deployment(tmp_path)
    try:
        assert cli_main(["run", str(path), "--plugin-count", str(tmp_path / "n.txt"), "-q"]) == 0
    finally:
        EXPORTERS.pop("plugin_count", None)
    assert (tmp_path / "n.txt").read_text() == "4"


def test_run_help_lists_the_flags_of_the_deployments_plugin_exporters(tmp_path, capsys):
    """docs/deployments.md: `dvpipe run --help` lists the flags of the exporters registered, including those of
    the deployment's plugins (argparse's --help exits while parsing: the plugins were not imported yet); the
    deployment is found after an option's value that is an existing file too (`--json prev.json dep.yaml`)."""
    other = tmp_path / "prev.json"
    other.write_text("{}", encoding="utf-8")
    for k, before in enumerate(([], ["--json", str(other)])):
        folder = tmp_path / f"d{k}"  # a plugin file of its own each time: a file is imported once per process
        folder.mkdir()
        path = _plugin_deployment(folder)
        try:
            with pytest.raises(SystemExit) as e:
                cli_main(["run", *before, str(path), "--help"])
        finally:
            EXPORTERS.pop("plugin_count", None)
        assert e.value.code == 0
        out = capsys.readouterr().out
        assert "--plugin-count PATH" in out and "write the number of frame sets to PATH" in " ".join(out.split()), k


def test_a_plugin_that_does_not_import_is_named_not_its_flag(tmp_path, capsys):
    # the flag comes from the plugin: when the plugin fails to import, the error is the import's, not an
    # "unrecognized arguments" line about a flag the user read in the plugin's documentation
    path = _plugin_deployment(tmp_path, PLUGIN + "\ndef broken(:\n")
    assert cli_main(["run", str(path), "--plugin-count", str(tmp_path / "n.txt"), "-q"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "plugins[0]: cannot import count_plugin.py" in err[0] and "SyntaxError" in err[0], err


def test_the_docs_table_of_exporters_is_the_registrys():
    import re

    text = (Path(__file__).resolve().parents[2] / "docs" / "deployments.md").read_text(encoding="utf-8")
    m = re.search(r"<!-- exporter-table:start[^>]*-->\n(.*?)<!-- exporter-table:end -->", text, re.S)
    assert m, "docs/deployments.md lost its exporter-table markers"
    saved = dict(EXPORTERS)
    EXPORTERS.clear()
    EXPORTERS.update({k: v for k, v in saved.items() if v.__module__.startswith("dvpipe.")})
    try:
        want = markdown_reference()
    finally:
        EXPORTERS.clear()
        EXPORTERS.update(saved)
    assert m.group(1) == want, "regenerate the table: python -c 'from dvpipe.deploy.exporters import " \
                               "markdown_reference as m; print(m(), end=\"\")'"
