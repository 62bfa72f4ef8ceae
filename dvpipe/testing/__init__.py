"""Test scaffolding: helpers for testing dvpipe and deployments built on it, never used at run time.

Nothing in the rest of the package imports this package; it ships so that a deployment's own tests
(and dvpipe's tests, tools/soak.py, tools/ascend_smoke.py) can run without cameras or a device:

* :mod:`dvpipe.testing.deployments`: tiny rigs, synthetic deployment mappings, H.264/H.265 test
  streams (``synthetic_deployment``, ``tiny_rig``, ``encode_access_units``, ``test_pattern``).
* :mod:`dvpipe.testing.rtsp_server`: a loopback-only RTSP server that can drop, pause and restart on
  purpose (``LoopbackRtspServer``; ``python -m dvpipe.testing.rtsp_server FILE.mp4 ...``).
* :mod:`dvpipe.testing.dvpp`: the DVPP tests' targets, frames and error statistics (``CI_TARGETS``,
  ``error_stats``, ``kitti_rig``, ``h264_stream``, ...).

Import the submodule you need; importing this package imports none of them.
"""
