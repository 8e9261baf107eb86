"""Spin's `spin_sdk.redis` is not offered by moat: importing it raises
ImportError with one sentence saying so (docs/SERVE.md, "Spin SDK modules")."""
from spin_sdk import _not_offered

_not_offered("spin_sdk.redis", "outbound Redis")
