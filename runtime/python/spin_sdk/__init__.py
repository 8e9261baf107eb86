"""A stand-in for Spin's Python SDK, for programs run by moat.

`spin_sdk.http` (Request, Response, send), `spin_sdk.key_value` (the scoped
key-value store, docs/KV.md) and `spin_sdk.util` (collect) work; the SDK's
other modules (variables, llm, sqlite, redis, mqtt, mysql, postgres, wit)
raise ImportError when imported, with one sentence saying moat does not offer
them. docs/SERVE.md, "Spin SDK modules", lists them all.
"""


class _Variant:
    """A case of a WIT variant, the `value` of a componentize_py_types.Err
    (`ErrorCode_HttpRequestDenied()`, `Error_Other("why")`...)."""

    __slots__ = ("value",)

    def __init__(self, value=None):
        self.value = value

    def __repr__(self):
        name = type(self).__name__
        return f"{name}()" if self.value is None else f"{name}({self.value!r})"

    def __eq__(self, other):
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self.value == other.value

    __hash__ = None


def _not_offered(module, what):
    """Raised at the top of a module moat does not provide."""
    raise ImportError(f"moat does not offer {module} ({what}): a program run by moat "
                      "cannot use it", name=module)
