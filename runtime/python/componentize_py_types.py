"""`Ok`, `Err` and `Result`, as componentize-py's `componentize_py_types`.

Spin's Python SDK raises a WIT error as `Err(value)`, an exception whose
`value` says which error it is (`spin_sdk.http.ErrorCode_HttpRequestDenied()`,
`spin_sdk.key_value.Error_NoSuchStore()`...). moat's shims do the same, so
`except Err as e: if isinstance(e.value, ...)` works unchanged. Plain classes,
cheap to import.
"""

__all__ = ["Ok", "Err", "Result"]


class Ok:
    """A successful result; `value` is what it holds."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value

    def __repr__(self):
        return f"Ok(value={self.value!r})"

    def __eq__(self, other):
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self.value == other.value

    __hash__ = None


class Err(Exception):
    """A failed result, raised as an exception; `value` says which error."""

    def __init__(self, value, message=None):
        # moat's addition: an optional line saying why, which str() gives
        super().__init__(message if message is not None else repr(value))
        self.value = value
        self.message = message

    def __repr__(self):
        return f"Err(value={self.value!r})"

    def __reduce__(self):
        return (self.__class__, (self.value, self.message))


Result = (Ok, Err)  # for isinstance(); upstream's is a typing Union
