"""Read an mmdet3d / mmcv Python config without executing it.

mmcv 1.x and mmengine configs are Python files that the toolkits ``exec``; a config from a model
zoo is therefore code. :func:`load_config` instead parses the file with :mod:`ast` and evaluates
only the literal subset these configs are written in:

* assignments to names (``img_norm_cfg = dict(...)``, ``a = b = 1``, ``x += [...]``, ``a, b = 1, 2``);
* numbers, strings, ``True``/``False``/``None``, lists, tuples, dicts, sets;
* names bound earlier in the file (or by its ``_base_`` files through ``{{_base_.key}}``);
* calls of ``dict(...)`` (keywords and ``**mapping``), ``list(...)``, ``tuple(...)``;
* ``+ - * / // % **`` on numbers, ``+`` on strings/lists/tuples, unary ``-``/``+``/``not``,
  subscripts (``cfg['key']``, ``xs[0]``), f-strings of those.

Anything else (imports, other calls, attribute access, lambdas, comprehensions...) is refused with
the file and line. ``_base_`` files are read the same way and merged as mmcv does (dicts merge key
by key, ``_delete_=True`` replaces, everything else is overwritten by the child).

With ``allow_code=True`` and mmengine installed, mmengine's own ``Config.fromfile`` runs the file
(it executes it: only for configs you trust).
"""
from __future__ import annotations

import ast
import copy
import operator
import re
from pathlib import Path
from typing import Any, Callable, Mapping, cast

from ..errors import ConfigError

__all__ = ["load_config", "merge_configs"]

#: Largest string / sequence a config expression may build (a ``'x' * 10**9`` must not exhaust memory).
_MAX_LEN = 1_000_000
_MAX_BASE_DEPTH = 16
_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow}
_UNARY: dict[type, Callable[[Any], Any]] = {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Not: operator.not_}
_CALLS = {"dict", "list", "tuple"}
_BASE_REF = re.compile(r"\{\{\s*_base_\.([A-Za-z_][A-Za-z0-9_.]*)\s*\}\}")


class _Refused(Exception):
    def __init__(self, node: ast.AST, what: str):
        super().__init__(what)
        self.line = getattr(node, "lineno", 0)
        self.what = what


def _check_size(value: Any, node: ast.AST) -> Any:
    if isinstance(value, (str, list, tuple, dict, set, bytes)) and len(value) > _MAX_LEN:
        raise _Refused(node, f"expression builds {len(value)} items (limit {_MAX_LEN})")
    return value


class _Evaluator:
    """Evaluates the literal subset; ``names`` holds what the file has bound so far."""

    def __init__(self, names: dict):
        self.names = names

    def eval(self, node: ast.AST) -> Any:
        method = getattr(self, "_" + type(node).__name__, None)
        if method is None:
            raise _Refused(node, f"{type(node).__name__} expressions are not part of the config subset")
        return _check_size(method(node), node)

    def _Constant(self, node: ast.Constant):
        return node.value

    def _Name(self, node: ast.Name):
        if node.id in self.names:
            return self.names[node.id]
        if node.id in ("True", "False", "None"):
            return {"True": True, "False": False, "None": None}[node.id]
        raise _Refused(node, f"name {node.id!r} is not bound earlier in the config")

    def _List(self, node: ast.List):
        return [self.eval(e) for e in node.elts]

    def _Tuple(self, node: ast.Tuple):
        return tuple(self.eval(e) for e in node.elts)

    def _Set(self, node: ast.Set):
        return {self.eval(e) for e in node.elts}

    def _Dict(self, node: ast.Dict):
        out: dict = {}
        for k, v in zip(node.keys, node.values):
            if k is None:  # {**other}
                out.update(self._mapping(v))
            else:
                out[self.eval(k)] = self.eval(v)
        return out

    def _mapping(self, node: ast.AST) -> Mapping:
        value = self.eval(node)
        if not isinstance(value, Mapping):
            raise _Refused(node, f"** needs a dict, got {type(value).__name__}")
        return value

    def _Call(self, node: ast.Call):
        if not isinstance(node.func, ast.Name) or node.func.id not in _CALLS or node.func.id in self.names:
            what = node.func.id if isinstance(node.func, ast.Name) else ast.unparse(node.func)[:60]
            raise _Refused(node, f"call of {what}() (only dict(), list(), tuple() are evaluated)")
        fn = node.func.id
        if any(isinstance(a, ast.Starred) for a in node.args):
            raise _Refused(node, f"*args in {fn}()")
        args = [self.eval(a) for a in node.args]
        if fn == "dict":
            if len(args) > 1:
                raise _Refused(node, "dict() takes at most one positional argument")
            out = dict(args[0]) if args else {}
            for kw in node.keywords:
                if kw.arg is None:
                    out.update(self._mapping(kw.value))
                else:
                    out[kw.arg] = self.eval(kw.value)
            return out
        if node.keywords or len(args) > 1:
            raise _Refused(node, f"{fn}() takes one positional argument here")
        if args and not isinstance(args[0], (list, tuple, str, dict, set)):
            raise _Refused(node, f"{fn}() of a {type(args[0]).__name__}")
        return (list if fn == "list" else tuple)(args[0] if args else ())

    def _BinOp(self, node: ast.BinOp):
        op = _BINOPS.get(type(node.op))
        if op is None:
            raise _Refused(node, f"operator {type(node.op).__name__}")
        left, right = self.eval(node.left), self.eval(node.right)
        numbers = all(isinstance(v, (int, float)) for v in (left, right))
        if isinstance(node.op, ast.Pow) and not (numbers and abs(right) <= 64 and abs(left) <= 1e6):
            raise _Refused(node, "** only on small numbers")
        if isinstance(node.op, ast.Mult) and not numbers:
            count = right if isinstance(right, int) else left if isinstance(left, int) else None
            seq = left if count is right else right
            if count is None or not isinstance(seq, (str, list, tuple)) or count * len(seq) > _MAX_LEN:
                raise _Refused(node, "* on sequences only by a small integer")
        elif not numbers and not (isinstance(node.op, ast.Add) and type(left) is type(right)
                                  and isinstance(left, (str, list, tuple))):
            if not (isinstance(node.op, ast.Mod) and isinstance(left, str)):
                raise _Refused(node, f"{type(node.op).__name__} of {type(left).__name__} and {type(right).__name__}")
        try:
            return op(left, right)
        except (ArithmeticError, TypeError, ValueError) as e:
            raise _Refused(node, f"{type(e).__name__}: {e}") from None

    def _UnaryOp(self, node: ast.UnaryOp):
        op = _UNARY.get(type(node.op))
        if op is None:
            raise _Refused(node, f"operator {type(node.op).__name__}")
        value = self.eval(node.operand)
        if not isinstance(node.op, ast.Not) and not isinstance(value, (int, float)):
            raise _Refused(node, f"unary {type(node.op).__name__} of {type(value).__name__}")
        return op(value)

    def _Subscript(self, node: ast.Subscript):
        target = self.eval(node.value)
        if isinstance(node.slice, ast.Slice):
            parts = [None if p is None else self.eval(p) for p in (node.slice.lower, node.slice.upper, node.slice.step)]
            key: Any = slice(*parts)
        else:
            key = self.eval(node.slice)
        try:
            return target[key]
        except (KeyError, IndexError, TypeError) as e:
            raise _Refused(node, f"subscript failed: {type(e).__name__}: {e}") from None

    def _JoinedStr(self, node: ast.JoinedStr):
        out = []
        for part in node.values:
            if isinstance(part, ast.FormattedValue):
                if part.format_spec is not None or part.conversion not in (-1, None):
                    raise _Refused(part, "f-string formatting options")
                value = self.eval(part.value)
                if not isinstance(value, (str, int, float, bool)) and value is not None:
                    raise _Refused(part, f"f-string of a {type(value).__name__}")
                out.append(str(value))
            else:
                out.append(self.eval(part))
        return "".join(out)


def _bind(target: ast.AST, value: Any, names: dict) -> None:
    if isinstance(target, ast.Name):
        names[target.id] = value
        return
    if isinstance(target, (ast.Tuple, ast.List)) and all(isinstance(t, ast.Name) for t in target.elts):
        if not isinstance(value, (list, tuple)) or len(value) != len(target.elts):
            raise _Refused(target, "unpacking needs a sequence of matching length")
        for t, v in zip(target.elts, value):
            names[cast(ast.Name, t).id] = v
        return
    raise _Refused(target, f"assignment to {type(target).__name__} (only to names)")


def _run_module(tree: ast.Module, names: dict) -> dict:
    ev = _Evaluator(names)
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign):
            value = ev.eval(stmt.value)
            for t in stmt.targets:
                _bind(t, copy.deepcopy(value) if len(stmt.targets) > 1 else value, names)
        elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
            _bind(stmt.target, ev.eval(stmt.value), names)
        elif isinstance(stmt, ast.AugAssign) and isinstance(stmt.target, ast.Name):
            fake = ast.BinOp(left=ast.Name(id=stmt.target.id, ctx=ast.Load()), op=stmt.op, right=stmt.value)
            ast.copy_location(fake, stmt)
            ast.fix_missing_locations(fake)
            names[stmt.target.id] = ev.eval(fake)
        elif isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
            continue  # a docstring or a bare literal
        elif isinstance(stmt, ast.Pass):
            continue
        else:
            what = type(stmt).__name__
            if isinstance(stmt, (ast.Import, ast.ImportFrom)):
                what = "import statement"
            raise _Refused(stmt, f"{what} is not part of the literal config subset")
    return names


def merge_configs(base: dict, child: Mapping) -> dict:
    """mmcv's merge: dicts merge key by key (``_delete_=True`` in the child replaces), others overwrite."""
    out = dict(base)
    for k, v in child.items():
        if isinstance(v, Mapping) and not v.get("_delete_", False) and isinstance(out.get(k), Mapping):
            out[k] = merge_configs(dict(out[k]), v)
        elif isinstance(v, Mapping):
            out[k] = {kk: vv for kk, vv in v.items() if kk != "_delete_"}
        else:
            out[k] = v
    return out


def _lookup(cfg: Mapping, dotted: str):
    value: Any = cfg
    for part in dotted.split("."):
        if not isinstance(value, Mapping) or part not in value:
            raise KeyError(dotted)
        value = value[part]
    return value


def _read_file(path: Path, depth: int, chain: tuple) -> dict:
    if depth > _MAX_BASE_DEPTH or path in chain:
        raise ConfigError(f"{path}: _base_ inheritance loops or is deeper than {_MAX_BASE_DEPTH}")
    if path.suffix != ".py":
        raise ConfigError(f"{path}: only Python configs (.py) are read, got {path.suffix or 'no suffix'}")
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"cannot read config {path}: {e.strerror or e}") from None
    try:
        tree = ast.parse(text, filename=str(path))
    except SyntaxError as e:
        raise ConfigError(f"{path}:{e.lineno}: not valid Python: {e.msg}") from None
    # _base_ first: it must be a literal string or list of strings
    base_paths: list[str] = []
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "_base_" for t in stmt.targets):
            try:
                value = _Evaluator({}).eval(stmt.value)
            except _Refused as e:
                raise ConfigError(f"{path}:{e.line}: _base_ must be literal strings ({e.what})") from None
            base_paths = [value] if isinstance(value, str) else list(value)
            if not all(isinstance(b, str) for b in base_paths):
                raise ConfigError(f"{path}:{stmt.lineno}: _base_ must be a path or a list of paths")
    base: dict = {}
    for rel in base_paths:
        bp = (path.parent / rel).resolve()
        if not bp.is_file():
            raise ConfigError(f"{path}: _base_ file {rel} not found at {bp}")
        base = merge_configs(base, _read_file(bp, depth + 1, chain + (path,)))
    names: dict = {}
    if _BASE_REF.search(text):  # mmcv's {{_base_.key}} text substitution, resolved to names bound here
        def sub(m: re.Match) -> str:
            key = m.group(1)
            try:
                names["__dvpipe_base__" + key.replace(".", "__")] = copy.deepcopy(_lookup(base, key))
            except KeyError:
                raise ConfigError(f"{path}: {{{{_base_.{key}}}}} is not defined by its _base_ files") from None
            return "__dvpipe_base__" + key.replace(".", "__")
        text = _BASE_REF.sub(sub, text)
        tree = ast.parse(text, filename=str(path))
    try:
        _run_module(tree, names)
    except _Refused as e:
        raise ConfigError(f"{path}:{e.line}: {e.what}; dvpipe does not execute configs "
                          f"(allow_code=True runs it with mmengine, for a config you trust)") from None
    own = {k: v for k, v in names.items() if k != "_base_" and not k.startswith("__dvpipe_base__")}
    return merge_configs(base, own)


def load_config(config: "str | Path | Mapping", allow_code: bool = False) -> dict:
    """The top-level names of an mmdet3d / mmcv config as a plain dict.

    Args:
        config: a ``.py`` config path, or an already-loaded mapping (returned as a dict copy).
        allow_code: run the file with mmengine's ``Config.fromfile`` (executes it) instead of the
            restricted reader; needs mmengine installed.

    Raises:
        ConfigError: a construct outside the literal subset (file and line named), a missing
            ``_base_`` file, or mmengine missing with ``allow_code=True``.
    """
    if isinstance(config, Mapping):
        return copy.deepcopy(dict(config))
    path = Path(config)
    if allow_code:
        try:
            from mmengine.config import Config
        except ImportError:
            raise ConfigError("allow_code=True needs mmengine (pip install mmengine); without it dvpipe reads "
                              "the literal subset of the config") from None
        return Config.fromfile(str(path)).to_dict()
    return _read_file(path.resolve(), 0, ())
