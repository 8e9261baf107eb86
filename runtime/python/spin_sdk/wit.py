"""Spin's `spin_sdk.wit` is not offered by moat: importing it raises
ImportError with one sentence saying so (docs/SERVE.md, "Spin SDK modules")."""
from spin_sdk import _not_offered

_not_offered("spin_sdk.wit", "the raw WIT bindings of the Spin host")
