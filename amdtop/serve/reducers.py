"""How the wire pickles amdtop's objects: slotted dataclasses as ``cls(*fields)``, in one table every message uses."""

from __future__ import annotations

import copyreg
import dataclasses
import operator
import pickle
from collections.abc import Callable
from typing import Any


def by_fields(cls: type) -> Callable[[Any], tuple[type, tuple[Any, ...]]] | None:
    """A reducer that pickles an instance of ``cls`` as ``cls(*field values)``, where that rebuilds it: a dataclass
    with slots whose fields all go to ``__init__`` positionally and that has no ``__post_init__`` (``None`` else)."""
    if not (dataclasses.is_dataclass(cls) and "__slots__" in cls.__dict__) or hasattr(cls, "__post_init__"):
        return None
    fields = dataclasses.fields(cls)
    if not fields or any(not f.init or f.kw_only for f in fields):
        return None
    get = operator.attrgetter(*(f.name for f in fields))
    if len(fields) == 1:
        return lambda obj: (cls, (get(obj),))
    return lambda obj: (cls, get(obj))


class Reducers(dict[type, Any]):
    """The wire's pickling table (a ``Pickler.dispatch_table``): amdtop's slotted dataclasses by :func:`by_fields`,
    everything else as ``copyreg`` says. A frozen slotted dataclass otherwise pickles through the ``__getstate__``
    and ``__setstate__`` that ``dataclasses`` writes in Python, a loop over ``fields()`` per object each way: this
    halves encoding and decoding a frame (bench/serve_tick_parts.py).

    Each class's entry is made on its first lookup and kept, so later lookups are the dict's own (no Python call per
    object pickled): a class with no reducer of its own gets its ``__reduce_ex__``, which is what the pickler calls
    when the table has no entry."""

    def __missing__(self, cls: type) -> Any:
        reducer: Any = by_fields(cls) if cls.__module__.startswith("amdtop") else None
        if reducer is None:
            reducer = copyreg.dispatch_table.get(cls)
        if reducer is None:
            if issubclass(cls, type):
                raise KeyError(cls)  # a class itself (an enum's metaclass): the pickler saves it by name
            reducer = _REDUCE_EX
        self[cls] = reducer
        return reducer


_REDUCE_EX = operator.methodcaller("__reduce_ex__", pickle.HIGHEST_PROTOCOL)
REDUCERS = Reducers()
"""The one table every message is pickled with (the frame's delta forms add theirs: :mod:`amdtop.serve.delta`)."""
