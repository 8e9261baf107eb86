"""`collect`, as Spin's `spin_sdk.util` (SDK 4).

In SDK 4 a call that yields many items (the key-value store's `get_keys`)
returns a (stream, future) pair, and `await util.collect(pair)` turns it into
a list. moat's shims have every item at hand already: their pairs hold a
list and a finished result.
"""

from componentize_py_types import Err

__all__ = ["collect"]


class _Items:
    """The stream half of a pair: the items, all there."""

    __slots__ = ("items", "writer_dropped")

    def __init__(self, items):
        self.items = list(items)
        self.writer_dropped = True

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def __iter__(self):
        return iter(self.items)


class _Done:
    """The future half of a pair: its result (None, or an Err)."""

    __slots__ = ("result",)

    def __init__(self, result=None):
        self.result = result

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    async def read(self):
        return self.result


def _ready(items, result=None):
    return (_Items(items), _Done(result))


async def collect(pair):
    """Every item of the pair's stream, as a list; raises the pair's Err when
    its result is one."""
    stream, future = pair
    items = list(stream)
    result = await future.read() if hasattr(future, "read") else None
    if isinstance(result, Err):
        raise result
    return items
