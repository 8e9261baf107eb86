"""A minimal stand-in for Spin's Python SDK, for handlers run by `moat serve`.

Only `spin_sdk.http.Request` and `spin_sdk.http.Response` are provided.
"""
