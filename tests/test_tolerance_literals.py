"""No tolerance literal outside ``tests/tolerances.py``: every bound a test compares with is a named,
justified entry of that table.

The rule, checked on the syntax tree of every ``tests/**/*.py`` except ``tests/tolerances.py``: a
*tolerance literal* is a non-zero number written in the source (``1e-6``, ``-2``, ``0.5 / 57``: any
expression that contains a number and no name) in one of these places:

1. the value of a keyword argument named ``atol``, ``rtol``, ``abs``, ``rel``, ``tol``, ``tolerance``
   or ending in ``_tol`` (``np.allclose(a, b, atol=1e-6)``, ``pytest.approx(x, abs=1e-3)``);
2. a positional tolerance of ``allclose`` / ``isclose`` / ``assert_allclose`` (arguments 3 and 4:
   ``np.allclose(a, b, 1e-5)``);
3. the bound of a comparison whose other side takes an absolute value (a call of ``abs``, ``np.abs``,
   ``torch.abs``, ``.abs()``, ``np.fabs``): ``abs(x - y) <= 1e-6``, ``np.abs(a - b).max() < 2``,
   ``1e-3 > abs(d)``.

Zero is not a tolerance (an exact comparison). A number that is part of an expression with a name
(``2 * tol("x").atol``) is not a literal. A line may opt out with ``# not a tolerance:`` and a reason
(a count or a size compared after an ``abs``, say).
"""
from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent
TABLE_FILE = TESTS / "tolerances.py"
MARKER = "# not a tolerance:"
TOLERANCE_KEYWORDS = frozenset({"atol", "rtol", "abs", "rel", "tol", "tolerance"})
CLOSE_FUNCTIONS = frozenset({"allclose", "isclose", "assert_allclose"})
ABS_FUNCTIONS = frozenset({"abs", "fabs", "absolute"})


def _is_literal(node: ast.AST) -> bool:
    """A non-zero number written out: the expression holds a number and no name, attribute or call."""
    numbers = [n.value for n in ast.walk(node) if isinstance(n, ast.Constant)
               and isinstance(n.value, (int, float)) and not isinstance(n.value, bool)]
    if not numbers or any(isinstance(n, (ast.Name, ast.Attribute, ast.Call, ast.Subscript)) for n in ast.walk(node)):
        return False
    try:
        return bool(eval(compile(ast.Expression(node), "<tol>", "eval"), {"__builtins__": {}}))  # noqa: S307
    except Exception:  # noqa: BLE001 - not a plain arithmetic expression: count it as written
        return True


def _callee(call: ast.Call) -> str:
    f = call.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""


def _takes_abs(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Call) and _callee(n) in ABS_FUNCTIONS for n in ast.walk(node))


def tolerance_literals(source: str, filename: str) -> list[str]:
    """``file:line: what`` for every tolerance literal (see the module docstring) in ``source``."""
    lines = source.splitlines()
    found = []

    def hit(node: ast.AST, what: str) -> None:
        if MARKER not in lines[node.lineno - 1]:
            found.append(f"{filename}:{node.lineno}: {what} {ast.unparse(node)}")

    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.Call):
            for kw in node.keywords:
                if kw.arg and (kw.arg in TOLERANCE_KEYWORDS or kw.arg.endswith("_tol")) and _is_literal(kw.value):
                    hit(kw.value, f"{kw.arg}=")
            if _callee(node) in CLOSE_FUNCTIONS:
                for arg in node.args[2:4]:
                    if _is_literal(arg):
                        hit(arg, f"{_callee(node)}(..., tolerance")
        elif isinstance(node, ast.Compare) and len(node.ops) == 1:
            left, op, right = node.left, node.ops[0], node.comparators[0]
            if isinstance(op, (ast.Lt, ast.LtE)) and _takes_abs(left) and _is_literal(right):
                hit(right, "abs(...) bound")
            elif isinstance(op, (ast.Gt, ast.GtE)) and _takes_abs(right) and _is_literal(left):
                hit(left, "abs(...) bound")
    return sorted(found, key=lambda s: (s.split(":")[0], int(s.split(":")[1])))


def test_no_tolerance_literal_outside_the_table():
    found = []
    for path in sorted(TESTS.rglob("*.py")):
        if path != TABLE_FILE:
            found += tolerance_literals(path.read_text(encoding="utf-8"), str(path.relative_to(TESTS.parent)))
    assert not found, (f"{len(found)} tolerance literal(s) outside tests/tolerances.py; name each in its TABLE "
                       "(with why) and use tol(...):\n" + "\n".join(found))


def test_the_rule_finds_each_kind_of_literal_and_nothing_else():
    src = "\n".join([
        "np.testing.assert_allclose(a, b, atol=1e-6)",           # 1: keyword
        "assert x == pytest.approx(y, abs=-1e-3)",               # 2: keyword, negative
        "assert np.allclose(a, b, 1e-5)",                        # 3: positional
        "assert abs(x - y) <= 0.5 / 57",                         # 4: bound of an abs, an expression
        "assert np.abs(a - b).max() < 2",                        # 5: abs inside
        "assert 1e-3 > (a - b).abs().max()",                     # 6: flipped
        "assert np.allclose(a, b, atol=tol('x').atol)",          # named: fine
        "assert abs(x - y) <= 2 * tol('x').atol",                # a name in the expression: fine
        "assert np.abs(a - b).max() == 0",                       # exact
        "assert abs(a - b) <= 0",                                # zero is exact
        "assert len(a) < 3",                                     # no abs
        "assert np.abs(a - b).sum() <= 4  # not a tolerance: a count of pixels",
        "check(a, b, my_tol=0.1)",                               # 13: *_tol keyword
    ])
    assert [line.split(":")[1] for line in tolerance_literals(src, "t.py")] == ["1", "2", "3", "4", "5", "6", "13"]
