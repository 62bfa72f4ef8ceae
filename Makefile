# The two commands of the README:
#   make run   - set up .venv and run the bundled sample deployment (`dvpipe run`)
#   make test  - set up .venv and run the whole test suite, `make typecheck`, then `make test-lowest` (CI: .ci/run)
#   make typecheck   - mypy over dvpipe/ ([tool.mypy] in pyproject.toml)
#   make test-lowest - the lowest supported pins (numpy 1.24.0 = CANN 8.0's ceiling, OpenCV 4.8.0.76) in
#                      their own venv, without torch: a subset of the suite against the source tree
#                      (2 cores, 2026-12-01: 43 s of CPU from nothing, pip downloading, 34 s with the venv
#                      there; 1m47 and 1m07 wall while other jobs loaded the machine, 297 tests)
#   make test-slow   - the slow checks (a wheel installed into a fresh venv runs the sample, V4L2 on a vivid guest, ...)
VENV   ?= .venv
PYTHON ?= python3
PY      = $(VENV)/bin/python
STAMP   = $(VENV)/.dvpipe-installed

LOWEST_VENV ?= build/venv-lowest
LOWEST_PINS  = numpy==1.24.0 opencv-python-headless==4.8.0.76 av==17.0.0 pillow==10.0.0 pyyaml==6.0.1 simplejpeg==1.7.2
LOWEST_TESTS = tests/backends/test_cpu.py tests/test_geometry.py tests/test_pipeline.py tests/backends/test_jpeg_integrity.py \
               tests/deploy/test_sources.py tests/deploy/test_run_output.py tests/test_bare_install.py \
               tests/video/test_raw_yuv.py tests/video/test_synthetic_raw_yuv.py tests/deploy/test_config.py tests/test_samples.py \
               tests/deploy/test_video_sources.py tests/video/test_structures.py tests/video/test_yuv_path.py \
               tests/backends/test_swscale_exact.py

#   make test-deps   - the Debian packages some tests use (GStreamer's RTSP server for tests/deploy/test_rtsp_bframes.py;
#                      QEMU and v4l-utils for the V4L2 reader's tests on a guest with the kernel's vivid driver,
#                      tests/deploy/test_v4l2.py, which also fetches a Debian kernel package once, ~70 MB),
#                      installed with apt-get when run as root; without them those tests skip, saying so
TEST_APT = gstreamer1.0-rtsp gir1.2-gst-rtsp-server-1.0 gir1.2-gstreamer-1.0 gstreamer1.0-plugins-base \
           gstreamer1.0-plugins-good python3-gi qemu-system-x86 v4l-utils

.PHONY: run test typecheck test-lowest test-slow test-deps bench clean

$(STAMP): pyproject.toml setup.py dvpipe/backends/_native.c
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[test]'
	touch $(STAMP)

run: $(STAMP)
	$(VENV)/bin/dvpipe run

test: $(STAMP) test-deps
	$(PY) -m pytest
	$(MAKE) --no-print-directory typecheck
	$(MAKE) --no-print-directory test-lowest

# mypy over dvpipe/ with pyproject's [tool.mypy] (check_untyped_defs; per-module ignores for stub-less optional
# modules). 2 cores, 2026-12-01: ~30 s from cold (.mypy_cache absent), a few s warm
typecheck: $(STAMP)
	$(PY) -m mypy dvpipe

test-deps:
	@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $(TEST_APT) >/dev/null 2>&1 || \
	  { apt-get update -q >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
	    --no-install-recommends $(TEST_APT) >/dev/null 2>&1; } || \
	  echo "test-deps: apt-get could not install $(TEST_APT); the tests that need them skip"; \
	else echo "test-deps: not root or no apt-get: the tests that need $(TEST_APT) skip unless installed"; fi

test-lowest:
	$(PYTHON) -m venv $(LOWEST_VENV)
	$(LOWEST_VENV)/bin/python -m pip install -q $(LOWEST_PINS) 'pytest>=7'
	PYTHONPATH=$(CURDIR) $(LOWEST_VENV)/bin/python -m pytest -p no:cacheprovider $(LOWEST_TESTS)

test-slow: $(STAMP) test-deps
	$(PY) -m pytest -q -p no:cacheprovider -m slow

bench: $(STAMP)
	$(PY) tools/bench/peers.py --quick

clean:
	rm -rf $(VENV) $(LOWEST_VENV) out .pytest_cache

# The reference harness (not part of `make test`): dvpipe's images and img_metas against the published
# BEVFormer / PETR / BEVDet test pipelines running on mmdet3d 0.17.1, mmcv 1.4.0, mmdet 2.14.0 from PyPI
# in their own Python 3.11 venv (build/published-ref/venv, built by tools/published_ref/build_venv.sh on
# first use: a few minutes of pip), and mmdet3d 1.4's v1 info converter and dataset in a second one (venv-v1),
# on the bundled sample; prints one table (docs/mmdet3d.md). 2 cores, 2026-12-04: 64 s wall with the
# venvs there.
.PHONY: test-published
test-published: $(STAMP)
	PYTHONPATH=$(CURDIR) $(PY) tools/published_ref/run.py
