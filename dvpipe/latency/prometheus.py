"""Prometheus export for long-running deployments (optional extra: ``pip install 'dvpipe[prometheus]'``).

:class:`PrometheusExporter` is a :class:`~dvpipe.latency.stats.LatencyStats` listener::

    exporter = PrometheusExporter(port=9108)          # serves http://127.0.0.1:9108/metrics
    stats = LatencyStats(budgets={"end_to_end": 20e6}, listeners=[exporter])
    exporter.watch(snapshot)                          # per-camera frame/drop/stall counters, read at scrape

The server binds the loopback address unless ``addr`` says otherwise (``dvpipe run --prometheus
0.0.0.0:9108`` exposes it to the network): metrics name cameras, steps and rates, which is nobody
else's business by default.

Metrics (seconds, as Prometheus convention wants; ``namespace`` defaults to "dvpipe"):

* ``dvpipe_step_duration_seconds{step, camera, kind}`` histogram, one observation per span
  (``camera="batch"`` for batch-level steps); counters-only timelines feed ``_count``/``_sum`` only
  through ``dvpipe_step_seconds_total`` and ``dvpipe_step_spans_total`` counters;
* ``dvpipe_end_to_end_seconds{origin}`` histogram, origin "capture" or "arrival";
* ``dvpipe_critical_path_seconds_total{category}`` counter (the "where did the time go" breakdown);
* ``dvpipe_budget_violations_total{key}`` counter and ``dvpipe_batches_total`` counter (batches in the
  statistics: warm-up batches are not observed).

With :meth:`PrometheusExporter.watch` (``dvpipe run`` wires the run's frame accounting), read at every
scrape, per camera:

* ``dvpipe_frames_entered_total{camera}``, ``dvpipe_frames_emitted_total{camera}``;
* ``dvpipe_frames_dropped_total{camera, reason}`` (reason = the drop category of the run summary:
  ``late``, ``corrupt``, ``shutdown``, ...); ``dvpipe_masked_slots_total{camera, reason}``;
* ``dvpipe_camera_stalls_total{camera}``, ``dvpipe_camera_stalled_seconds_total{camera}``,
  ``dvpipe_camera_disconnects_total{camera}``, ``dvpipe_camera_reconnects_total{camera}``;
* ``dvpipe_frame_sets_total`` (every set emitted, warm-up included).
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

from .._optional import require
from .records import BatchRecord

__all__ = ["PrometheusExporter", "DEFAULT_BUCKETS_S"]

#: Histogram buckets in seconds: 0.25 ms ... 2 s, dense around typical 5-50 ms budgets.
DEFAULT_BUCKETS_S: tuple[float, ...] = (
    0.00025, 0.0005, 0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05,
    0.075, 0.1, 0.15, 0.25, 0.5, 1.0, 2.0,
)


def _prometheus_client():
    return require("prometheus_client")


class PrometheusExporter:
    """Observe :class:`BatchRecord` objects into Prometheus metrics; optionally serve them over HTTP.

    Args:
        port: start ``prometheus_client.start_http_server(port, addr)`` when given.
        addr: address the server binds (default ``127.0.0.1``, this machine only; ``0.0.0.0`` exposes it).
        registry: a ``CollectorRegistry`` (default: a new private one, so several exporters coexist;
            pass ``prometheus_client.REGISTRY`` to join the process-wide default).
        namespace: metric name prefix.
        buckets_s: histogram buckets in seconds.
    """

    def __init__(self, *, port: int | None = None, addr: str = "127.0.0.1", registry: Any = None,
                 namespace: str = "dvpipe", buckets_s: Sequence[float] = DEFAULT_BUCKETS_S) -> None:
        pc = _prometheus_client()
        self._pc = pc
        self.registry = registry if registry is not None else pc.CollectorRegistry()
        buckets = tuple(buckets_s)
        self.step_seconds = pc.Histogram("step_duration_seconds", "Duration of each pipeline step (one per span)",
                                         ["step", "camera", "kind"], namespace=namespace, buckets=buckets,
                                         registry=self.registry)
        self.step_total = pc.Counter("step_seconds_total", "Total time per step (also from counters-only runs)",
                                     ["step", "camera"], namespace=namespace, registry=self.registry)
        self.step_spans = pc.Counter("step_spans_total", "Number of spans per step", ["step", "camera"],
                                     namespace=namespace, registry=self.registry)
        self.end_to_end = pc.Histogram("end_to_end_seconds", "Output minus capture (or arrival) per batch",
                                       ["origin"], namespace=namespace, buckets=buckets, registry=self.registry)
        self.critical = pc.Counter("critical_path_seconds_total", "Critical-path time by category",
                                   ["category"], namespace=namespace, registry=self.registry)
        self.violations = pc.Counter("budget_violations_total", "Samples over their budget", ["key"],
                                     namespace=namespace, registry=self.registry)
        self.batches = pc.Counter("batches_total", "Batches observed", namespace=namespace, registry=self.registry)
        self.namespace = namespace
        self.server = None
        if port is not None:
            self.server = pc.start_http_server(port, addr=addr, registry=self.registry)

    def __call__(self, record: BatchRecord) -> None:
        self.observe(record)

    def observe(self, record: BatchRecord) -> None:
        """Add one batch's figures to the metrics."""
        for name, cam, d in record.steps:
            camera = cam if cam is not None else "batch"
            self.step_seconds.labels(name, camera, record.step_kinds.get(name, ("", ""))[0]).observe(d / 1e9)
            self.step_total.labels(name, camera).inc(d / 1e9)
            self.step_spans.labels(name, camera).inc()
        for name, cam, count, total_ns, _max in record.step_counters:
            camera = cam if cam is not None else "batch"
            self.step_total.labels(name, camera).inc(total_ns / 1e9)
            self.step_spans.labels(name, camera).inc(count)
        if record.capture_to_output_ns is not None:
            self.end_to_end.labels("capture").observe(record.capture_to_output_ns / 1e9)
        if record.arrival_to_output_ns is not None:
            self.end_to_end.labels("arrival").observe(record.arrival_to_output_ns / 1e9)
        for cat, v in record.breakdown_ns.items():
            self.critical.labels(cat).inc(v / 1e9)
        for key, _v in record.violations:
            self.violations.labels(key).inc()
        self.batches.inc()

    def watch(self, snapshot: Callable[[], Mapping[str, Any]]) -> None:
        """Export per-camera frame, drop and stall counters read from ``snapshot()`` at every scrape.

        ``snapshot()`` returns ``{"sets": int, "cameras": {camera: {"entered": int, "emitted": int,
        "dropped": {reason: int}, "masked": {reason: int}, "stalls": int, "stalled_s": float,
        "disconnects": int, "reconnects": int}}}`` (missing keys read as 0).
        """
        self.registry.register(_SnapshotCollector(self._pc, self.namespace, snapshot))

    def exposition(self) -> bytes:
        """The metrics in the Prometheus text format (what ``/metrics`` serves)."""
        return self._pc.generate_latest(self.registry)

    def close(self) -> None:
        """Stop the HTTP server if this exporter started one and close its socket (``shutdown`` only ends the
        serving loop: the port would still accept connections and stay taken until ``server_close``)."""
        server = self.server
        if server is not None:
            srv = server[0] if isinstance(server, tuple) else server
            for step in ("shutdown", "server_close"):
                call = getattr(srv, step, None)
                if call is not None:
                    call()
            self.server = None


class _SnapshotCollector:
    """A prometheus_client collector over a snapshot callable (counters that other code keeps)."""

    _PER_CAMERA = (("frames_entered_total", "entered", "Frames that entered the run (per camera)"),
                   ("frames_emitted_total", "emitted", "Frames emitted in a batch (per camera)"),
                   ("camera_stalls_total", "stalls", "Stalls: no frame for run.stall_timeout_ms"),
                   ("camera_stalled_seconds_total", "stalled_s", "Time spent stalled"),
                   ("camera_disconnects_total", "disconnects", "Connections lost"),
                   ("camera_reconnects_total", "reconnects", "Reconnections that succeeded"))
    _BY_REASON = (("frames_dropped_total", "dropped", "Frames dropped, by reason (summary drop categories)"),
                  ("masked_slots_total", "masked", "Batch slots masked, by reason"))

    def __init__(self, pc: Any, namespace: str, snapshot: Callable[[], Mapping[str, Any]]) -> None:
        self._core = require("prometheus_client.core")
        self._ns = namespace
        self._snapshot = snapshot

    def describe(self):  # no metrics at registration time: the snapshot may not be ready yet
        return []

    def collect(self):
        core = self._core
        snap = self._snapshot()
        cams = snap.get("cameras", {})
        name = (lambda n: f"{self._ns}_{n}") if self._ns else (lambda n: n)
        for metric, key, help_ in self._PER_CAMERA:
            fam = core.CounterMetricFamily(name(metric).removesuffix("_total"), help_, labels=["camera"])
            for cam, c in cams.items():
                fam.add_metric([cam], float(c.get(key, 0)))
            yield fam
        for metric, key, help_ in self._BY_REASON:
            fam = core.CounterMetricFamily(name(metric).removesuffix("_total"), help_, labels=["camera", "reason"])
            for cam, c in cams.items():
                for reason, n in sorted(c.get(key, {}).items()):
                    fam.add_metric([cam, reason], float(n))
            yield fam
        fam = core.CounterMetricFamily(name("frame_sets"), "Frame sets emitted (warm-up included)")
        fam.add_metric([], float(snap.get("sets", 0)))
        yield fam
