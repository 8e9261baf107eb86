"""A minimal stand-in for Spin's Python SDK, for programs run by moat.

`spin_sdk.http` (Request, Response) for `moat serve` handlers and
`spin_sdk.key_value` (the scoped key-value store, docs/KV.md).
"""
