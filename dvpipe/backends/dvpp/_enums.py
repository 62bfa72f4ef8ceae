"""pyACL enumerations the DVPP backend and the software device use (plain constants).

Sources: ``acldvppPixelFormat`` values 0..17 as listed on the pyACL page of
``acl.media.dvpp_vpc_convert_color_async`` (CANN 5.0.4 aclpythondevg_01_0270: "12: PIXEL_FORMAT_RGB_888,
13: PIXEL_FORMAT_BGR_888" ...) [verified]; ``aclrtMemcpyKind`` 0..3 (CANN 8.0.0 aclpythondevg_01_0120)
[verified]; ``acldvppStreamFormat`` (H265_MAIN_LEVEL = 0, H264_BASELINE = 1, H264_MAIN = 2,
H264_HIGH = 3) and ``acldvppJpegFormat`` [inferred from public Ascend sample code and the MxBase
mirror of the enums, not read on a CANN page]; ``aclrtRunMode`` ACL_DEVICE = 0, ACL_HOST = 1
[inferred from public Ascend samples].
"""
from __future__ import annotations

__all__ = ["PIXEL_FORMAT", "PIXEL_FORMAT_NAME", "MEMCPY", "RUN_MODE", "ENTYPE", "JPEG_FORMAT"]

#: knowledge-base pixel format name -> acldvppPixelFormat value
PIXEL_FORMAT = {
    "yuv400": 0, "nv12": 1, "nv21": 2, "yuv422sp": 3, "yvu422sp": 4, "yuv444sp": 5, "yvu444sp": 6,
    "yuyv": 7, "uyvy": 8, "yvyu": 9, "vyuy": 10, "yuv444packed": 11, "rgb888": 12, "bgr888": 13,
    "argb8888": 14, "abgr8888": 15, "rgba8888": 16, "bgra8888": 17,
}
PIXEL_FORMAT_NAME = {v: k for k, v in PIXEL_FORMAT.items()}
#: PIXEL_FORMAT_UNKNOWN: JPEGD keeps the source subsampling
PIXEL_FORMAT_UNKNOWN = 10000

MEMCPY = {"host_to_host": 0, "host_to_device": 1, "device_to_host": 2, "device_to_device": 3}
RUN_MODE = {"device": 0, "host": 1}

#: acldvppStreamFormat (VDEC "entype")
ENTYPE = {"h265_main": 0, "h264_baseline": 1, "h264_main": 2, "h264_high": 3}

#: acldvppJpegFormat (dvpp_jpeg_get_image_info_v2)
JPEG_FORMAT = {"444": 0, "422": 1, "420": 2, "400": 3, "440": 4, "411": 5, "unknown": 1000}
