"""Helpers of the torch backend (:mod:`dvpipe.backends.torch_device`); imported only with it.

* :mod:`.device` — device names, streams, events, pinned staging buffers and timed transfers;
* :mod:`.resample` — separable resampling with OpenCV's weights (``INTER_LINEAR``/``AREA``/``NEAREST``)
  applied as gathers, crops folded into the gather indices;
* :mod:`.colour` — NV12 (YUV 4:2:0 semi-planar) to RGB/BGR, BT.601 full (JFIF) or limited range.
"""
