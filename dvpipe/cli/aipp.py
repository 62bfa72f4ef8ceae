"""``dvpipe aipp``: write the ATC ``aipp_op`` configuration of the AIPP route.

Forms::

    dvpipe aipp DEPLOYMENT.yaml -o aipp.cfg [--soc S --cann V] [--colour-standard STD]
    dvpipe aipp --profile NAME --soc SOC [--size WxH] [--source jpeg|h264|h265] [--colour-standard STD] -o aipp.cfg

On the AIPP route DVPP decodes and resizes each camera into NV12, and the model's AIPP (inserted by
``atc --insert_op_conf aipp.cfg``) does the trailing crop, the YUV -> RGB/BGR conversion, Normalise and
Pad on the AI Core (:mod:`dvpipe.backends.dvpp.aipp`). The configuration is the one the run hands the
model: the cameras are planned as ``dvpipe run`` plans them (the whole rig in one plan, one batch: backends
``dvpp``, ``aipp``, ``cpu``, fidelity ``fast``, the target's documented rules, on the software device) and its
``plan.device_batch["aipp"]`` is written, so DVPP's documented detours are in it (JPEGD floors odd sizes, VPC
writes even NV12 pictures at the target's output stride; e.g. KITTI 1242x375 for bevformer-tiny on Ascend310P3:
source 624x186, picture 620x186, padding right 20 / bottom 6). Where the profile pads beyond AIPP's documented
limits (32 a side, padded width <= 1080: bevformer-base / -small, 1600x900 -> 1600x928), or the cameras' DVPP
pictures differ in size (1600x900 and 1600x920 padded to one 800x480 input), the run takes the canvas route (VPC
pastes each picture into the top-left of a padded slot whose border holds the pad colour) and the config written
is that route's: no crop, no padding, source = the whole slot at its strides. The batch is one model input, so
there is one ``aipp_op`` (``related_input_rank`` 0; ATC applies one static ``aipp_op`` per model input). A rig the
run cannot batch, or does not put on the AIPP route, is an error naming the reason. Where the deployment's own
backends, fidelity or a camera's own backends keep its run off the AIPP route, the config is written with a
note saying what to set. Nothing here has run on Ascend hardware.

Colour standard: the run's (JPEG -> ``jpeg_full``, JFIF full-range BT.601; H.264 / H.265 -> the camera's rig
keys ``yuv_matrix`` / ``yuv_range``, else what a video file source signals in its VUI (read from the header,
as the run does), else ``bt601_narrow``; with ``--profile`` no stream is read), unless ``--colour-standard``
says otherwise.

Exit status: 0 written; 2 bad arguments, or a stage list AIPP cannot express (one line saying why).
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Any, Optional

from .._typing import Fidelity

_SOURCE_STANDARD = {"jpeg": "jpeg_full", "h264": "bt601_narrow", "h265": "bt601_narrow"}  # the run's defaults


def add_arguments(p: argparse.ArgumentParser) -> None:
    from ..backends.dvpp.aipp import COLOUR_STANDARDS

    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.epilog = ("examples:\n"
                "  dvpipe aipp samples/deployment.yaml -o aipp.cfg --soc Ascend310P3\n"
                "  dvpipe aipp --profile bevformer-tiny --soc Ascend310P3 -o aipp.cfg\n"
                "  atc --model=model.onnx --framework=5 --soc_version=Ascend310P3 --insert_op_conf=aipp.cfg ...\n"
                "exit status: 0 written; 2 bad arguments or a stage list AIPP cannot express")
    p.add_argument("deployment", nargs="?", metavar="DEPLOYMENT.yaml", help="a deployment YAML")
    p.add_argument("--profile", help="a model profile (instead of a deployment)")
    p.add_argument("--soc", help="SoC name as acl.get_soc_name() returns it (e.g. Ascend310P3); the target the "
                                 "camera is planned for (required with --profile, or for a deployment without "
                                 "a target)")
    p.add_argument("--cann", help="CANN version of the target (default: the deployment's, else the latest dvpipe's "
                                  "tables know)")
    p.add_argument("--size", metavar="WxH", help="camera size with --profile (default 1600x900)")
    p.add_argument("--source", choices=tuple(_SOURCE_STANDARD),
                   help="what the camera sends, with --profile (default jpeg)")
    p.add_argument("--colour-standard", choices=COLOUR_STANDARDS,
                   help="the NV12 picture's YCbCr standard (default: the run's: JPEG jpeg_full; H.264/H.265 the "
                        "camera's yuv_matrix / yuv_range, else a video file's signalled one, else bt601_narrow)")
    p.add_argument("-o", "--output", required=True, metavar="aipp.cfg", help="file to write ('-' for stdout)")


def main(args: argparse.Namespace) -> int:
    from ..errors import ConfigError
    from . import error_text

    try:
        groups = _routes(args)
    except ConfigError as e:
        print(f"dvpipe aipp: error: {error_text(e)}", file=sys.stderr)
        return 2
    text = "".join(_header(args)) + "\n".join(
        "".join(_block_comment(names, r) for names, r in _kinds(members)) + cfg.to_cfg() for cfg, members in groups)
    if args.output == "-":
        sys.stdout.write(text)
        out = sys.stderr
    else:
        try:
            with open(args.output, "w", encoding="utf-8") as f:
                f.write(text)
        except OSError as e:
            print(f"dvpipe aipp: error: cannot write {args.output}: {e.strerror or e}", file=sys.stderr)
            return 2
        out = sys.stdout
        print(f"wrote {args.output}: {len(groups)} aipp_op block{'s' if len(groups) > 1 else ''} (static, not run "
              "on hardware)", file=out)
    for c, members in groups:
        order = "RGB" if c.matrix_r0c2 != 0 else "BGR"  # row 0 uses V (Cr) for R, U (Cb) for B
        print(f"  related_input_rank {c.related_input_rank}: {', '.join(n for n, _ in members)}", file=out)
        kinds = _kinds(members)
        for names, route in kinds:  # cameras sharing the block may reach it differently (the canvas route)
            who = f"{', '.join(names)}: " if len(kinds) > 1 else ""
            print(f"    {who}{route.describe()}", file=out)
            for n in route.notes:
                print(f"    note: {n}", file=out)
        print(f"    channels {order}, colour standard {_standard_of(c)}, mean_chn "
              f"{[c.mean_chn_0, c.mean_chn_1, c.mean_chn_2]} + min_chn {[c.min_chn_0, c.min_chn_1, c.min_chn_2]}, "
              f"var_reci {[round(c.var_reci_chn_0, 6), round(c.var_reci_chn_1, 6), round(c.var_reci_chn_2, 6)]}",
              file=out)
    oh, ow = groups[0][0].output_hw
    print(f"  next: atc ... --insert_op_conf={args.output if args.output != '-' else 'aipp.cfg'} (the model input "
          f"becomes uint8 NV12; its original shape stays N,3,{oh},{ow})", file=out)
    return 0


def _header(args: argparse.Namespace) -> list[str]:
    src = args.deployment or f"--profile {args.profile} --soc {args.soc}"
    return [f"# written by dvpipe aipp ({src}); static AIPP for atc --insert_op_conf.\n",
            "# Nothing in it has run on Ascend hardware.\n"]


def _kinds(members: list[tuple[str, Any]]) -> list[tuple[list[str], Any]]:
    """The cameras of one block grouped by how they reach it (description and notes), in order."""
    kinds: dict[tuple, tuple[list[str], Any]] = {}
    for name, route in members:
        kinds.setdefault((route.describe(), route.notes), ([], route))[0].append(name)
    return list(kinds.values())


def _block_comment(names: list[str], route: Any) -> str:
    """A comment above a block for cameras on the canvas route: what the slot AIPP reads holds (ATC ignores
    ``#`` lines)."""
    if route.canvas_pad_nv12 is None:
        return ""
    h, w = route.dvpp_size
    return (f"# canvas route ({', '.join(names)}): the source is the whole {route.config.src_image_size_w}x"
            f"{route.config.src_image_size_h} slot; VPC pastes the {w}x{h} picture into its top-left and the border "
            f"holds NV12 {tuple(route.canvas_pad_nv12)}\n")


def _standard_of(c: Any) -> str:
    from ..backends.dvpp.aipp import CSC_MATRICES

    rows = tuple(tuple(int(v) for v in r) for r in c.matrix.tolist())
    for name, (m, bias) in CSC_MATRICES.items():
        if (rows in (m, (m[2], m[1], m[0])) and bias == (c.input_bias_0, c.input_bias_1, c.input_bias_2)):
            return "jpeg_full/bt601_full" if name in ("jpeg_full", "bt601_full") else name
    return "custom"


def _target(soc: str, cann: Optional[str]) -> Any:
    from ..errors import ConfigError
    from ..knowledge import latest_checked, soc_info
    from ..target import Target

    try:
        soc_info(soc)
        return Target(soc, cann or str(latest_checked()))
    except ValueError as e:
        raise ConfigError(f"--soc/--cann: {e}") from None


def _route(name: str, cam: Any, stages: list, target: Any) -> Any:
    """One camera's AIPP route as the run plans a rig of that camera alone (the ``--profile`` form)."""
    return _batch_routes([cam], stages, target, name)[0][1]


def _batch_routes(cameras: list, stages: list, target: Any, who: Optional[str] = None) -> list[tuple[str, Any]]:
    """``(camera, AippRoute)`` for each camera, in batch order, as the run plans them: all the cameras in one
    plan (``Pipeline`` plans the rig as one batch, ``plan_pipeline(rig.cameras, ...)``), on the software device
    of ``target``, and the one AippConfig that plan hands the model (``plan.device_batch["aipp"]``, the route's
    ``batch_layout``: DVPP's documented detours, and the canvas route where AIPP cannot pad or the cameras'
    pictures differ). Every route holds that same config; ``dvpp_size`` is the camera's own picture.
    ``who``: the name errors start with (default: none; the run's messages name the cameras)."""
    from ..backends.dvpp.aipp import AippRoute
    from ..errors import ConfigError, PlanError
    from ..planner import plan_pipeline

    try:
        plan = plan_pipeline(cameras, stages, ("dvpp-sim", "aipp-sim", "cpu"), fidelity="fast", target=target)
    except (ConfigError, PlanError) as e:
        raise ConfigError(f"{who}: {e}" if who else str(e)) from None
    b = plan.device_batch
    if b is None:
        cp = plan.cameras[0]
        steps = cp.steps
        last = dict(steps[-1].verdicts).get("aipp-sim")
        off = next((s for s in steps if s.backend.name != "dvpp-sim" and s.name != "transfer"), steps[-1])
        dv = dict(off.verdicts).get("dvpp-sim")
        why = (last.reason if last is not None and "runs elsewhere" not in last.reason
               else f"step {off.name} runs on {off.backend.name}" + (f" ({dv.reason})" if dv is not None else ""))
        raise ConfigError(f"{who or cp.camera.name}: the run on {target.soc} (CANN {target.cann}) does not put this "
                          f"camera on the AIPP route: {why}")
    canvas = b.get("canvas")
    if canvas is None:
        route = AippRoute(b["aipp"], (int(b["height"]), int(b["width"])))
        return [(who or cp.camera.name, route) for cp in plan.cameras]
    # the canvas route: AIPP reads the padded slot VPC pasted each camera's picture into
    y, u, v = (int(c) for c in canvas["pad_nv12"])
    pictures = {name: (int(hw[0]), int(hw[1])) for name, hw in canvas.get("pictures", {}).items()}
    if len(set(pictures.values())) > 1:
        why = (f"the cameras' DVPP pictures differ ({', '.join(f'{n} {w}x{h}' for n, (h, w) in pictures.items())}) "
               "and the batch has one model input")
    else:
        why = (f"the padding to {b['width']}x{b['height']} is beyond AIPP's documented limits (32 a side, padded "
               "width <= 1080; acl.mdl.set_aipp_padding_params)")
    out = []
    for cp in plan.cameras:
        ph, pw = pictures.get(cp.camera.name, (int(canvas["picture"][0]), int(canvas["picture"][1])))
        note = (f"{why}: the run pastes each {pw}x{ph} picture into the top-left of a {b['width']}x{b['height']} "
                "canvas slot with VPC (acldvppVpcCropResizePasteAsync), so this config only converts and normalises "
                "the whole slot at its strides")
        out.append((who or cp.camera.name, AippRoute(b["aipp"], (ph, pw), (note,), canvas_pad_nv12=(y, u, v))))
    return out


def _routes(args: argparse.Namespace) -> list[tuple[Any, list[tuple[str, Any]]]]:
    """The ``aipp_op`` block and its cameras: ``[(AippConfig, [(camera, AippRoute), ...])]``. One block: the run
    plans the deployment's cameras as one batch and its model has one image input (``related_input_rank`` 0)."""
    from dataclasses import replace

    from ..backends.dvpp.aipp import recolour
    from ..errors import ConfigError
    from ..profiles import PROFILES, profile_stages
    from ..types import Camera, check_one_size, parse_wxh

    if bool(args.deployment) == bool(args.profile):
        raise ConfigError("give a DEPLOYMENT.yaml or --profile NAME (one of them)")
    if args.deployment and (args.size or args.source):  # the deployment's cameras say both
        raise ConfigError(f"{'--size' if args.size else '--source'} goes with --profile (a deployment's cameras "
                          "give their own size and encoding)")
    target = _target(args.soc, args.cann) if args.soc else None
    if args.profile:
        if args.profile not in PROFILES:
            raise ConfigError(f"unknown profile {args.profile!r}; known: {', '.join(PROFILES)}")
        if target is None:
            raise ConfigError("--profile needs --soc (the DVPP output stride and size detours AIPP reads depend on it)")
        h, w = parse_wxh(args.size or "1600x900", "--size")
        cam = Camera("camera", width=w, height=h, encoding=args.source or "jpeg")
        notes = _order_note(args.profile, "reference")
        cameras, stages, who = [cam], profile_stages(args.profile, "fast", cam), "camera"
    else:
        if not os.path.exists(args.deployment):
            raise ConfigError(f"no such file: {args.deployment}")
        from ..deploy.config import load_deployment

        from ..deploy.sources._probe import with_stream_colour

        dep = with_stream_colour(load_deployment(args.deployment))  # as the run plans it
        if target is None and dep.target is not None:  # the deployment's own target, unless --soc says otherwise
            target = _target(dep.target.soc, args.cann or str(dep.target.cann))
        if target is None:
            raise ConfigError("the deployment names no target: give --soc (the DVPP output stride and size detours "
                              "AIPP reads depend on it)")
        p = dep.pipeline
        rig = dep.rig  # the run's batch: the rig's cameras, in its order (deploy._assembly.build_pipeline)
        profile: Any = p.profile  # a name, or a Profile built from the mmdet3d config
        if p.mmdet3d_config is not None:
            from ..mmdet3d import order_rig, profile_from_config

            mapped = p.mapped if p.mapped is not None else profile_from_config(p.mmdet3d_config, skip=p.skip)
            profile, rig = mapped.profile, order_rig(mapped, rig)  # as Pipeline.from_mmdet3d_config
        cameras = list(rig.cameras)
        if profile is not None:  # as Pipeline.from_profile: one size, the stages of its first camera
            what = f"profile {profile if isinstance(profile, str) else profile.name}"
            stages = profile_stages(profile, "fast", check_one_size(cameras, what))
            notes = _order_note(profile, p.fidelity)
        else:
            stages, notes = list(p.stages or ()), []
        notes = [*notes, *_run_route_notes(dep)]
        who = None
    routes = _batch_routes(cameras, stages, target, who)
    config = routes[0][1].config
    standard = args.colour_standard or _camera_standard(cameras[0])  # one standard: batch_layout refuses a mix
    if standard is not None and recolour(config, standard) != config:
        config = recolour(config, standard)
        notes = [*notes, f"--colour-standard {standard} differs from the run's slot standard "
                         f"({_run_standard(cameras[0])}): frames a DVPP step hands to its CPU fallback are uploaded "
                         "in the run's; set yuv_matrix / yuv_range on the camera so that both agree"]
    members = [(name, replace(route, config=config, notes=tuple(notes) + route.notes)) for name, route in routes]
    return [(config, members)]


def _takes_aipp(names: Any) -> bool:
    """Whether a backend preference list names an AIPP backend (``aipp``, ``aipp-sim``); ``auto`` never picks one."""
    from ..backends import resolve
    from ..errors import ConfigError

    def family(name: str) -> str:
        try:
            return resolve(name).family
        except ConfigError:  # "auto", or a name the loader already refused
            return ""

    return any(family(str(n)) == "aipp" for n in names)


def _run_route_notes(dep: Any) -> list[str]:
    """What keeps the deployment's own run off the AIPP route the config is written for (its backends, a camera's
    own backends, its fidelity): the config is still written, and these notes say what to set for the run to
    feed the model NV12 through it (otherwise the run hands the model normalised tensors)."""
    p, out = dep.pipeline, []
    if not _takes_aipp(p.backends):
        out.append(f"the deployment's run does not take the AIPP route: pipeline.backends is [{', '.join(p.backends)}]"
                   " (auto never picks AIPP); set [aipp, dvpp, cpu] for the run to feed the model through this config")
    if p.fidelity != "fast":
        out.append(f"the deployment runs at fidelity {p.fidelity}, where the AIPP step is declined; set "
                   "pipeline.fidelity: fast for the run to use this config")
    own = [c.name for c in dep.cameras if c.backends and not _takes_aipp(c.backends)]
    if own and _takes_aipp(p.backends):
        out.append(f"{', '.join(own)}: the camera's own backends name no AIPP backend, so the run keeps it off "
                   "the AIPP route (the batch has one model input): give it aipp too")
    return out


def _order_note(profile: Any, fidelity: Fidelity) -> list[str]:
    from ..profiles import _get

    p = _get(profile)
    if p.normalise_first and fidelity == "reference" and (p.scale is not None or p.fit_width is not None):
        return [f"{p.name} normalises before resizing at fidelity reference; on the AIPP route DVPP resizes the "
                "uint8 picture first (the order of fidelity fast)"]
    return []


def _run_standard(cam: Any) -> str:
    from ..backends.dvpp.route import _colour_standard

    return _colour_standard(cam)


def _camera_standard(cam: Any) -> Optional[str]:
    """The camera's colour standard from its rig keys ``yuv_matrix`` / ``yuv_range``, read as the run reads them
    (:func:`dvpipe.backends.dvpp.colour.camera_colour_standard`: case-insensitive; JPEG stays ``jpeg_full``);
    None when neither key is set: the run's default (JPEG: jpeg_full; video: bt601_narrow)."""
    from ..backends.dvpp.colour import camera_colour_standard

    extra = getattr(cam, "extra", {}) or {}
    if not ({"yuv_matrix", "yuv_range"} & set(extra)):
        return None
    return camera_colour_standard(cam)
