"""The torch backend by job (:mod:`dvpipe.backends.torch_device` is its entry); imported only with it, when torch is.

Kernels, each module with ``supports(query) -> KernelVerdict`` and ``kernel(data, stages, ctx)``:

* :mod:`.decode` — JPEG/PNG decode with ``torchvision.io`` (nvJPEG on CUDA, per-frame CPU fallback);
* :mod:`.program` — the fused pixel kernel: any run of resize / crop / normalise / pad / batch;
* :mod:`.undistort` — ``grid_sample`` on the camera's sampling grid;
* :mod:`.transfer` — host <-> device copies as their own step.

Helpers:

* :mod:`.device` — device names, streams, events, pinned staging buffers and timed transfers;
* :mod:`.resample` — separable resampling with OpenCV's weights (``INTER_LINEAR``/``AREA``/``NEAREST``)
  applied as gathers, crops folded into the gather indices;
* :mod:`.colour` — NV12 (YUV 4:2:0 semi-planar) to RGB/BGR, BT.601 full (JFIF) or limited range.
"""
