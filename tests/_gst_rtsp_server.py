"""GStreamer's RTSP server (gst-rtsp-server, Debian's gstreamer1.0-rtsp and gir1.2-gst-rtsp-server-1.0)
serving MP4 files on 127.0.0.1, run by the system Python (python3-gi) as a subprocess of the tests.

    /usr/bin/python3 tests/_gst_rtsp_server.py PORT [auth=basic|digest:USER:PASSWORD] [tls=CERT.pem:KEY.pem] NAME=FILE.mp4 [...]

Each file is served at ``rtsp://127.0.0.1:PORT/NAME`` (``rtsps://`` with ``tls=``: RTSP in TLS with that
certificate and key): demuxed (qtdemux) and payloaded as RTP
(rtph264pay, or rtph265pay for ``*.h265.mp4``, tagged ``hvc1``, or rtpjpegpay for ``*.mjpeg.mov``) with the file's timestamps, in real time. Prints
``ready`` once listening, and for each session, 0.3 s after it starts playing, ``start NAME NS``:
the wall clock (ns since the epoch) at which the file's pts 0 was due (now - the position it plays).
"""
import sys
import time

import gi

gi.require_version("Gst", "1.0")
gi.require_version("GstRtsp", "1.0")
gi.require_version("GstRtspServer", "1.0")
from gi.repository import Gio, GLib, Gst, GstRtsp, GstRtspServer  # noqa: E402

Gst.init(None)


def on_state(media, state, name):
    if state == Gst.State.PLAYING:
        GLib.timeout_add(300, report, media, name)


def report(media, name):
    """The session's position (the pts being sent now, the file being paced in real time) against
    the wall clock: when its pts 0 was due."""
    ok, position = media.get_element().query_position(Gst.Format.TIME)
    if ok and position >= 0:
        print(f"start {name} {time.time_ns() - position}", flush=True)
    return False


def require_auth(server, spec):
    """``basic:USER:PASSWORD`` or ``digest:USER:PASSWORD``: every mount needs that user."""
    method, user, password = spec.split(":", 2)
    auth = GstRtspServer.RTSPAuth()
    token = GstRtspServer.RTSPToken()
    token.set_string("media.factory.role", "viewer")
    if method == "digest":
        auth.set_supported_methods(GstRtsp.RTSPAuthMethod.DIGEST)
        auth.add_digest(user, password, token)
    else:
        auth.set_supported_methods(GstRtsp.RTSPAuthMethod.BASIC)
        auth.add_basic(GstRtspServer.RTSPAuth.make_basic(user, password), token)
    server.set_auth(auth)
    permissions = GstRtspServer.RTSPPermissions()
    permissions.add_role_from_structure(Gst.Structure.new_empty("viewer"))
    permissions.add_permission_for_role("viewer", "media.factory.access", True)
    permissions.add_permission_for_role("viewer", "media.factory.construct", True)
    return permissions


port, mounts = sys.argv[1], sys.argv[2:]
server = GstRtspServer.RTSPServer()
server.set_address("127.0.0.1")
server.set_service(port)
points = server.get_mount_points()
permissions = None
for mount in mounts:
    name, path = mount.split("=", 1)
    if name == "auth":
        permissions = require_auth(server, path)
        continue
    if name == "tls":  # a server auth object that presents the certificate, every user let in
        cert, key = path.split(":", 1)
        auth = server.get_auth() or GstRtspServer.RTSPAuth()
        auth.set_tls_certificate(Gio.TlsCertificate.new_from_files(cert, key))
        token = GstRtspServer.RTSPToken()
        token.set_string("media.factory.role", "anonymous")
        auth.set_default_token(token)
        server.set_auth(auth)
        permissions = GstRtspServer.RTSPPermissions()
        permissions.add_role_from_structure(Gst.Structure.new_empty("anonymous"))
        permissions.add_permission_for_role("anonymous", "media.factory.access", True)
        permissions.add_permission_for_role("anonymous", "media.factory.construct", True)
        continue
    factory = GstRtspServer.RTSPMediaFactory()
    pay = "rtph265pay" if path.endswith(".h265.mp4") else "rtph264pay"  # H.265: tagged hvc1 (rtph265pay's caps)
    if path.endswith(".mjpeg.mov"):  # MJPEG in QuickTime: RFC 2435 RTP (the JPEGs' own quantisation tables)
        pay = "rtpjpegpay"
    options = "" if pay == "rtpjpegpay" else " config-interval=-1"  # parameter sets before every keyframe
    factory.set_launch(f"( filesrc location={path} ! qtdemux name=d d.video_0 ! queue ! {pay} name=pay0 pt=96"
                       f"{options} )")
    if permissions is not None:
        factory.set_permissions(permissions)
    factory.connect("media-configure", lambda f, media, name=name: media.connect("new-state", on_state, name))
    points.add_factory("/" + name, factory)
if server.attach(None) == 0:
    sys.exit(f"cannot listen on 127.0.0.1:{port}")
print("ready", flush=True)
GLib.MainLoop().run()
