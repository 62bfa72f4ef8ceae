"""The built-in exporters: ``summary.json``, ``latency.json``, the trace, plots, dumps, Prometheus and
the HTML report (registration order = the order they are opened, observed and closed).

Each is one class, declared as a user's exporter is: its YAML keys are an ``Options`` dataclass, its
short YAML form is :meth:`~dvpipe.deploy.exporters.Exporter.shorthand` (``trace: true``, ``trace:
t.json``, ``prometheus: 9108``) and its ``dvpipe run`` flag is a
:class:`~dvpipe.deploy.exporters.CliFlag` (``--trace``, ``--json``, ``--plots``, ``--report``,
``--prometheus``); nothing about them lives elsewhere.
"""
from __future__ import annotations

import json
import os
import queue
import threading
from dataclasses import dataclass
from typing import Any, Mapping, Optional

import numpy as np

from .._files import write_whole
from ..errors import ConfigError
from ..latency.trace import DEFAULT_MAX_EVENTS
from ..types import short_repr as _show
from ._exporter_registry import BatchResult, CliFlag, Exporter, RunContext, option, register_exporter
from ._validate import _MAX_FRAMES

__all__ = ["SummaryExporter", "LatencyJsonExporter", "TraceExporter", "PlotsExporter", "DumpsExporter",
           "PrometheusOutput", "HtmlReportExporter", "BUILTIN_EXPORTERS", "jsonable", "parse_host_port"]


def _path_shorthand(value: Any) -> Optional[Any]:
    """``true`` (the default name), ``false`` / ``null`` (off), a path, or the mapping form."""
    if value is False or value is None:
        return None
    if value is True:
        return {}
    if isinstance(value, str) and value:
        return {"path": value}
    if isinstance(value, Mapping):
        return value
    raise ConfigError(f"expected true, false or a path, got {_show(value)}")


def _path_flag(value: str) -> Mapping[str, Any]:
    """A flag's path: relative to the working directory (an option's is relative to ``outputs.dir``)."""
    return {"path": os.path.abspath(os.path.expanduser(value))}


def _file_folder(options: Mapping[str, Any]) -> tuple[str, ...]:
    return (os.path.dirname(options["path"]) or ".",)


def _file_path(options: Mapping[str, Any]) -> tuple[str, ...]:
    return (options["path"],)


@register_exporter("summary")
class SummaryExporter(Exporter):
    """``outputs.dir/summary.json`` (``metrics: true``): the frame account, the plan, transfers, routes."""

    takes_key = False
    enabled_by = "`outputs.metrics` (default true)"

    @classmethod
    def implied(cls, outputs):
        return {} if outputs.metrics and outputs.dir else None

    def open(self, run: RunContext) -> None:
        self.run = run

    def close(self, result: Any) -> dict[str, str]:
        path = self.run.output_path("summary.json")
        write_whole(path, json.dumps(self.run.summary(), indent=1))
        return {"summary": path}


@register_exporter("latency")
class LatencyJsonExporter(Exporter):
    """The latency statistics as JSON (:func:`dvpipe.latency.to_json`): ``--json PATH``, else
    ``outputs.dir/latency.json`` with ``metrics: true``."""

    takes_key = False
    enabled_by = "`outputs.metrics`"
    flag = CliFlag("--json", "PATH", "write the latency statistics as JSON")
    from_flag = staticmethod(_path_flag)
    output_folders = staticmethod(_file_folder)
    output_files = staticmethod(_file_path)

    @dataclass
    class Options:
        path: str = option("latency.json", "the statistics file (relative to outputs.dir)")

    @classmethod
    def implied(cls, outputs):
        return {"path": "latency.json"} if outputs.metrics and outputs.dir else None

    def open(self, run: RunContext) -> None:
        self.stats = run.stats
        self.path = run.output_path(self.options["path"])

    def close(self, result: Any) -> dict[str, str]:
        write_whole(self.path, json.dumps(self.stats.to_json(), indent=1))
        return {"latency": self.path}


@register_exporter("trace")
class TraceExporter(Exporter):
    """The Chrome/Perfetto trace (``outputs.trace``, ``--trace``): a bounded ring of the most recent
    frame sets' events (``max_events``), written at the end."""

    @dataclass
    class Options:
        path: str = option("trace.json", "the trace file (relative to outputs.dir); `trace: PATH` is short for it")
        max_events: int = option(DEFAULT_MAX_EVENTS, "events kept: the most recent frame sets' (bounds memory "
                                                     "and file size)", minimum=1, maximum=100_000_000)

    shorthand = staticmethod(_path_shorthand)
    flag = CliFlag("--trace", "PATH", "write a Chrome/Perfetto trace of every frame set")
    from_flag = staticmethod(_path_flag)
    output_folders = staticmethod(_file_folder)
    output_files = staticmethod(_file_path)
    legacy_keys = {"trace_max_events": "max_events"}

    def open(self, run: RunContext) -> None:
        from ..latency import TraceWriter

        st = run.stats  # what `dvpipe trace FILE` needs to give latency.json's figures from the trace alone
        stats = {"warmup": st.warmup, "budgets_ns": dict(st.budgets), "camera_order": list(st.camera_order),
                 "window": st.window}
        self.writer = TraceWriter(run.output_path(self.options["path"]), metadata={"deployment": run.deployment.name,
                                  "stats": stats}, max_events=self.options["max_events"])
        self.sets = 0

    def observe(self, result: BatchResult) -> None:
        self.writer.add(result.timeline)
        self.sets += 1

    def close(self, result: Any) -> dict[str, str]:
        return {"trace": str(self.writer.write())} if self.sets else {}


@register_exporter("plots")
class PlotsExporter(Exporter):
    """Latency plots as PNG (:func:`dvpipe.latency.plots.write_plots`; needs matplotlib): ``--plots
    DIR`` or ``outputs.plots``."""

    @dataclass
    class Options:
        path: str = option("plots", "the plots folder (relative to outputs.dir); `plots: PATH` is short for it")

    shorthand = staticmethod(_path_shorthand)
    flag = CliFlag("--plots", "DIR", "write latency plots (PNG; needs matplotlib)")
    from_flag = staticmethod(_path_flag)

    @staticmethod
    def output_folders(options):
        return (options["path"],)

    def open(self, run: RunContext) -> None:
        self.folder = run.output_path(self.options["path"])

    def close(self, result: Any) -> dict[str, str]:
        if not result.sets:
            return {}
        from ..latency.plots import write_plots

        try:
            paths = write_plots(result.stats, self.folder)
        except ImportError as e:
            return {"plots": f"not written: {e}"}
        return {"plots": str(self.folder), **{f"plot_{k}": str(v) for k, v in paths.items()}}


@register_exporter("dumps")
class DumpsExporter(Exporter):
    """Every ``outputs.dumps.every``-th frame set (at most ``max``) as ``dumps/set_NNNNNN.npz`` (the
    images, ``valid``) and ``.json`` (index, set time in ns, cameras, drops, metas).

    ``observe`` only copies the batch and queues the copy (at most :attr:`queue_size` waiting); a
    writer thread writes them. When the disk cannot keep up: a run that is not real-time (recordings
    read as fast as possible) waits for the writer, so every set asked for is dumped; a real-time
    run (a live source, ``run.realtime``) skips the dump rather than fall behind its cameras, and
    counts it: ``outputs["dumps"]`` then reads ``DIR: N written, M skipped (writer queue full), K
    failed``."""

    queue_size = 4  #: dumps waiting for the writer thread; beyond it a real-time run skips (and counts) a dump

    @dataclass
    class Options:
        every: int = option(1, "dump every N-th frame set (by set index)", minimum=1, maximum=_MAX_FRAMES)
        max: int = option(10, "at most this many dumps per run", minimum=1, maximum=1_000_000)

    def open(self, run: RunContext) -> None:
        self.every, self.max = self.options["every"], self.options["max"]
        self.folder = run.output_path("dumps")
        self.accepted = self.skipped = self.failed = self.written = 0
        self.wait_for_writer = not run.deployment.live  # nothing is gained by skipping in a run that is not real-time
        self.error: Optional[str] = None
        self._queue: Optional[queue.Queue] = None
        self._thread: Optional[threading.Thread] = None

    def observe(self, result: BatchResult) -> None:
        if result.index % self.every or self.accepted >= self.max:
            return
        if self._queue is None:
            self._queue = queue.Queue(self.queue_size)
            self._thread = threading.Thread(target=self._writer, name="dvpipe-dumps", daemon=True)
            self._thread.start()
        batch = result.batch
        images = batch.images
        if isinstance(images, np.ndarray):
            images = np.array(images, copy=True)
        elif hasattr(images, "to_host"):  # the AIPP route: the NV12 batch, (N, Hs * 3 / 2, Ws) uint8 (one download)
            from ..device import nv12_batch_to_host

            images = np.array(nv12_batch_to_host(images), copy=True)
        else:
            images = images.detach().cpu().numpy()
        fs = result.frame_set
        doc = {"index": fs.index, "set_time_ns": fs.time_ns, "cameras": list(batch.cameras),
               "drops": list(batch.drops), "metas": [jsonable(m) for m in batch.metas]}
        job = (fs.index, images, np.array(batch.valid, copy=True), doc)
        try:
            self._queue.put(job, block=self.wait_for_writer)
            self.accepted += 1
        except queue.Full:
            self.skipped += 1

    def _writer(self) -> None:
        assert self._queue is not None
        while True:
            job = self._queue.get()
            if job is None:
                return
            index, images, valid, doc = job
            try:
                os.makedirs(self.folder, exist_ok=True)
                base = os.path.join(self.folder, f"set_{index:06d}")
                np.savez_compressed(base + ".npz", images=images, valid=valid)
                with open(base + ".json", "w", encoding="utf-8") as f:
                    json.dump(doc, f, indent=1)
                self.written += 1
            except Exception as e:  # noqa: BLE001 - a failed dump is counted and reported, the run goes on
                self.failed += 1
                self.error = self.error or f"{type(e).__name__}: {e}"

    def _flush(self) -> None:
        """Wait for the writer to write what it accepted."""
        if self._thread is not None and self._queue is not None:
            self._queue.put(None)
            self._thread.join()
            self._thread = None

    def close(self, result: Any) -> dict[str, str]:
        self._flush()
        if not (self.written or self.skipped or self.failed):
            return {}
        if not (self.skipped or self.failed):
            return {"dumps": self.folder}
        return {"dumps": f"{self.folder}: {self.written} written, {self.skipped} skipped (writer queue full), "
                         f"{self.failed} failed" + (f" ({self.error})" if self.error else "")}

    abort = _flush


@register_exporter("prometheus")
class PrometheusOutput(Exporter):
    """``/metrics`` over HTTP (``outputs.prometheus``, ``--prometheus``): per-step and end-to-end
    histograms of every measured set, per-camera frame, drop and stall counters read at each scrape."""

    writes_files = False

    @dataclass
    class Options:
        port: int = option(doc="TCP port of /metrics; `prometheus: PORT` is short for {port: PORT}", minimum=1,
                           maximum=65535)
        addr: str = option("127.0.0.1", "address the server binds (127.0.0.1: this machine; 0.0.0.0 exposes it)")

    flag = CliFlag("--prometheus", "[HOST:]PORT",
                   "serve metrics at http://HOST:PORT/metrics (default host 127.0.0.1, this machine only; "
                   "0.0.0.0:PORT exposes them; needs dvpipe[prometheus])")

    @staticmethod
    def shorthand(value):
        if value is None or value is False:
            return None
        return value if isinstance(value, Mapping) else {"port": value}

    @staticmethod
    def from_flag(value):
        host, port = parse_host_port(value)
        return {"port": port, "addr": host}

    def open(self, run: RunContext) -> None:
        from ..latency.prometheus import PrometheusExporter

        addr, port = self.options["addr"], self.options["port"]
        try:
            self.exporter = PrometheusExporter(port=port, addr=addr)
        except OSError as e:  # the port taken, an address this machine does not have, a name that does not resolve
            where = f"[{addr}]:{port}" if ":" in addr else f"{addr}:{port}"
            raise ConfigError(f"cannot serve /metrics on {where} (--prometheus): {e.strerror or e}",
                              "outputs.prometheus") from None
        self.exporter.watch(run.accounting.counters)

    def observe(self, result: BatchResult) -> None:
        if not result.warmup:
            self.exporter.observe(result.record)

    def close(self, result: Any) -> dict[str, str]:
        self.exporter.close()
        return {}

    def abort(self) -> None:
        self.exporter.close()


@register_exporter("report")
class HtmlReportExporter(Exporter):
    """The one-page HTML report (:mod:`dvpipe.latency.html_report`: plots, plan, frame account):
    ``outputs.report`` or ``--report PATH``."""

    @dataclass
    class Options:
        path: str = option("report.html", "the report file (relative to outputs.dir); `report: PATH` is short for it")

    shorthand = staticmethod(_path_shorthand)
    flag = CliFlag("--report", "PATH", "write a one-page HTML report (plots, plan, frame account)")
    from_flag = staticmethod(_path_flag)
    output_folders = staticmethod(_file_folder)
    output_files = staticmethod(_file_path)

    def open(self, run: RunContext) -> None:
        self.path = run.output_path(self.options["path"])

    def close(self, result: Any) -> dict[str, str]:
        from ..latency.html_report import write_report

        return {"report": str(write_report(result, self.path))}


def parse_host_port(text: str, flag: str = "--prometheus") -> tuple[str, int]:
    """``PORT``, ``HOST:PORT`` or ``[IPv6]:PORT`` -> ``(host, port)``; the host defaults to 127.0.0.1."""
    host, sep, port = str(text).rpartition(":")
    if not sep:
        host, port = "127.0.0.1", str(text)
    bracketed = host.startswith("[") and host.endswith("]")
    host = host[1:-1] if bracketed else host
    if (not bracketed and (":" in host or "[" in host or "]" in host)) or not port.isdigit() \
            or not 1 <= int(port) <= 65535 or not host:  # an IPv6 host needs its brackets: [::1]:9108
        raise ConfigError(f"{flag} {text}: expected PORT or HOST:PORT with a port in 1..65535 "
                          "(e.g. 9108, or 0.0.0.0:9108 to expose the metrics)")
    return host, int(port)


def jsonable(v: Any) -> Any:
    """``v`` with numpy arrays and scalars turned into lists and Python numbers (for ``json.dump``)."""
    if isinstance(v, dict):
        return {str(k): jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [jsonable(x) for x in v]
    if isinstance(v, np.ndarray):
        return v.tolist()
    if isinstance(v, np.integer):
        return int(v)
    if isinstance(v, np.floating):
        return float(v)
    if isinstance(v, np.bool_):
        return bool(v)
    return v


#: the built-in exporter classes, in registration order
BUILTIN_EXPORTERS = (SummaryExporter, LatencyJsonExporter, TraceExporter, PlotsExporter, DumpsExporter,
                     PrometheusOutput, HtmlReportExporter)
