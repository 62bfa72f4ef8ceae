"""Prometheus: loopback by default, HOST:PORT to expose, per-camera frame / drop / stall counters,
read with a real HTTP GET on 127.0.0.1 and parsed with prometheus_client's own text parser."""
from __future__ import annotations

import socket
import urllib.request

import pytest

from dvpipe.cli.run import parse_host_port
from dvpipe.deploy import Runner, load_deployment
from dvpipe.testing.deployments import synthetic_deployment
from dvpipe.errors import ConfigError

pc = pytest.importorskip("prometheus_client")
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _samples(body: str) -> dict[tuple[str, tuple], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(body) for s in fam.samples}


def test_host_port_parsing():
    assert parse_host_port("9108") == ("127.0.0.1", 9108)
    assert parse_host_port("0.0.0.0:9108") == ("0.0.0.0", 9108)
    assert parse_host_port("[::1]:9108") == ("::1", 9108)
    for bad in ("0", "70000", "host:", ":9108", "nine", "[::1", "::1:9108", "[::1:9108"):  # IPv6 needs [host]
        with pytest.raises(ConfigError, match=r"--prometheus .*expected PORT or HOST:PORT"):
            parse_host_port(bad)


def test_a_port_that_cannot_be_served_is_a_configuration_error_naming_it():
    """The port already taken (a real listener on 127.0.0.1): the run does not start, and the error names the
    option and the address, not only "[Errno 98]"."""
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        dep = load_deployment(synthetic_deployment(1, outputs={"metrics": False, "prometheus": port}))
        with pytest.raises(ConfigError) as ei:
            Runner(dep, write_outputs=False)
    assert ei.value.path == "outputs.prometheus" and f"127.0.0.1:{port} (--prometheus)" in str(ei.value)
    assert "in use" in str(ei.value)


def test_the_deployment_default_binds_loopback_only():
    dep = load_deployment(synthetic_deployment(1, outputs={"metrics": False, "prometheus": 9108}))
    assert dict(dep.outputs.exporters["prometheus"]) == {"port": 9108, "addr": "127.0.0.1"}


def test_metrics_per_camera_over_http_on_loopback():
    port = _free_port()
    corrupt = (2, 5)  # CAM1's frames 2 and 5 are damaged in the source: two corrupt drops, CAM0 none
    dep = synthetic_deployment(2, frames=8, faults={"CAM1": {"corrupt": list(corrupt)}})
    dep["outputs"] = {"metrics": False, "prometheus": port}
    runner = Runner(load_deployment(dep), write_outputs=False)
    try:
        assert runner.prometheus.server[0].server_address[0] == "127.0.0.1"
        for _ in runner.batches():
            pass
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    finally:
        runner.close()
        runner.finish()
    m = _samples(body)
    assert m[("dvpipe_frames_entered_total", (("camera", "CAM0"),))] == 8
    assert m[("dvpipe_frames_entered_total", (("camera", "CAM1"),))] == 8
    assert m[("dvpipe_frames_emitted_total", (("camera", "CAM1"),))] == 8 - len(corrupt)
    assert m[("dvpipe_frames_dropped_total", (("camera", "CAM1"), ("reason", "corrupt")))] == len(corrupt)
    assert not any(k[0] == "dvpipe_frames_dropped_total" and ("camera", "CAM0") in k[1] for k in m)
    assert m[("dvpipe_camera_stalls_total", (("camera", "CAM0"),))] == 0
    assert ("dvpipe_camera_stalled_seconds_total", (("camera", "CAM1"),)) in m
    assert m[("dvpipe_frame_sets_total", ())] == 8


def test_cli_flag_exposes_on_the_address_given(tmp_path, monkeypatch):
    """``--prometheus HOST:PORT`` binds that address (here the loopback one: nothing leaves the machine)."""
    import dvpipe.latency.prometheus as prom

    bound = []
    real = prom.PrometheusExporter.__init__

    def spy(self, **kw):
        real(self, **kw)
        bound.append(self.server[0].server_address[:2])

    monkeypatch.setattr(prom.PrometheusExporter, "__init__", spy)
    import yaml

    from dvpipe.cli import main as cli_main

    p = tmp_path / "dep.yaml"
    p.write_text(yaml.safe_dump(synthetic_deployment(1, frames=2)))
    port = _free_port()
    assert cli_main(["run", str(p), "--no-outputs", "-q", "--prometheus", f"127.0.0.1:{port}"]) == 0
    assert bound == [("127.0.0.1", port)]


def test_close_frees_the_port_for_the_next_run_in_this_process():
    """socketserver: ``shutdown()`` only stops ``serve_forever``; the socket stays bound and listening (connections
    accepted, never answered) until ``server_close()``. After ``close()`` the port must refuse connections and a
    second exporter (a second run in one process) must bind it."""
    from dvpipe.latency.prometheus import PrometheusExporter

    port = _free_port()
    first = PrometheusExporter(port=port)
    held = first.server  # anything still holding the server (a caller, a reference cycle) keeps an unclosed socket
    first.close()
    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", port)) != 0
    second = PrometheusExporter(port=port)
    try:
        assert urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).status == 200
    finally:
        second.close()
    del held
