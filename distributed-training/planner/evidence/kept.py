"""Work a document's sections repeat, done once while it renders.

The guide's sections quote the same evidence several times: five of them price every published run
(published.compare), six read every lab's GPU rows (own_runs.all_runs). Inside `one_render()` (guide.render holds
it) a function marked `@kept` runs once per argument tuple and each caller gets its own deep copy; outside, every
call works afresh, so nothing is kept from one render to the next (a test that changes a CSV or the model between
two renders sees the change, and a second render is computed exactly as the first). Arguments are the key, so
they must be hashable (a call with an unhashable one is simply not kept).
"""

from __future__ import annotations

import copy
from contextlib import contextmanager
from functools import wraps
from typing import Callable, Iterator, TypeVar

F = TypeVar("F", bound=Callable)
_KEPT: dict | None = None  # results by (function, arguments) while a document renders; None otherwise


@contextmanager
def one_render() -> Iterator[None]:
    """Within the block, each @kept call is computed once (a nested block shares the outer one's results)."""
    global _KEPT
    outer = _KEPT
    _KEPT = {} if outer is None else outer
    try:
        yield
    finally:
        _KEPT = outer


def kept(fn: F) -> F:
    """fn's result for the same arguments computed once inside one_render(); every caller gets a deep copy."""
    @wraps(fn)
    def wrapper(*args, **kwargs):
        if _KEPT is None:
            return fn(*args, **kwargs)
        key = (fn.__module__, fn.__qualname__, args, tuple(sorted(kwargs.items())))
        try:
            hash(key)
        except TypeError:
            return fn(*args, **kwargs)
        if key not in _KEPT:
            _KEPT[key] = fn(*args, **kwargs)
        return copy.deepcopy(_KEPT[key])
    return wrapper
