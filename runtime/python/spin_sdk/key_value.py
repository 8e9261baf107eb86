"""The scoped key-value store, shaped like Spin's `spin_sdk.key_value`.

    from spin_sdk import key_value
    store = key_value.open_default()
    store.set("visits", b"1")
    store.get("visits")          # b"1"; None when absent

Spin's Python SDK 4 spells the same calls with `await`; both forms work here:
awaiting `open`/`open_default` gives a store whose methods are coroutines
(`get_keys` then returns what `spin_sdk.util.collect` takes), used
without `await` they give the synchronous store of SDK 3:

    with await key_value.open_default() as store:
        await store.set("visits", b"1")
        keys = await util.collect(await store.get_keys())

Errors are `Error`, a `componentize_py_types.Err` whose `value` is one of
`Error_NoSuchStore()`, `Error_AccessDenied()`, `Error_StoreTableFull()` or
`Error_Other(message)`, as the SDK raises them.

Every call is synchronous: a request goes to moat's broker over the socket
whose fd number is in the environment variable MOAT_KV_FD, and the call
returns once the broker answered (after the storage I/O). docs/KV.md is the
contract, including the wire format used below. Without MOAT_KV_FD (the
request did not say `"kvEnabled": true`) this module still imports, but
opening a store raises `Error` (kind `access_denied`).

The checks here only give early, clear errors; the broker re-checks
everything. Stdlib only, and cheap to import: it loads no module that a
plain `python3` start does not already have.
"""

import os
from _thread import allocate_lock   # threading.Lock, without importing threading

from componentize_py_types import Err
from spin_sdk import _Variant

__all__ = ["Error", "Error_AccessDenied", "Error_NoSuchStore", "Error_Other",
           "Error_StoreTableFull", "Store", "open", "open_default"]

# Operations and statuses of the broker protocol (docs/KV.md).
_GET, _SET, _DELETE, _EXISTS, _KEYS, _OPEN = 1, 2, 3, 4, 5, 6
_OK, _NOT_FOUND, _ERROR = 0, 1, 2

MAX_KEY = 255                   # bytes of UTF-8
_MAX_FRAME = 0xFFFFFFFF         # a frame's u32 length
_READ_CHUNK = 1 << 20

_DISABLED = "kvEnabled is false for this request: the key-value store is not available"
_EOF = "the key-value broker closed the connection"


class Error_NoSuchStore(_Variant):
    """No store has that label."""


class Error_AccessDenied(_Variant):
    """This program may not open the store (kvEnabled is false)."""


class Error_StoreTableFull(_Variant):
    """A quota of the store was reached."""


class Error_Other(_Variant):
    """Anything else; `value` is the message."""


_VARIANTS = {"no_such_store": Error_NoSuchStore, "access_denied": Error_AccessDenied,
             "store_table_full": Error_StoreTableFull}


class Error(Err):
    """A key-value store error. `kind` is one of `no_such_store`,
    `access_denied`, `store_table_full` (a quota), `invalid` (a bad key or
    value) or `other`; `message` is one line saying why (also `str(e)`).
    As the SDK's `Err`, `value` is the matching `Error_*` case (`invalid` and
    `other` are `Error_Other(message)`)."""

    def __init__(self, kind, message):
        Exception.__init__(self, message)
        self.kind = kind
        self.message = message
        variant = _VARIANTS.get(kind)
        self.value = variant() if variant else Error_Other(message)

    def __repr__(self):
        return f"Error({self.kind!r}, {self.message!r})"

    def __reduce__(self):       # pickle (multiprocessing) with both fields
        return (self.__class__, (self.kind, self.message))


class _Connection:
    """The program's end of the broker socket, shared by every Store.

    The lock keeps each request/answer exchange whole when several threads
    use the store. After a failure that may leave the stream between two
    frames (EOF, an I/O error, an interrupted call), the connection is dead:
    every later call raises the same error instead of reading out of step."""

    def __init__(self, fd):
        self.fd = fd
        self.lock = allocate_lock()
        self.dead = None        # the Error every call raises once set

    def call(self, op, key=b"", value=b""):
        """(status, payload) of one request."""
        head = ((5 + len(key) + len(value)).to_bytes(4, "little") + bytes((op,))
                + len(key).to_bytes(4, "little") + key)
        with self.lock:
            if self.dead is not None:
                raise Error(self.dead.kind, self.dead.message)
            try:
                if len(value) <= 65536:
                    self._write(head + value)
                else:               # no copy of a big value
                    self._write(head)
                    self._write(value)
                size = int.from_bytes(self._read(4), "little")
                if size < 1:
                    raise Error("other", "the key-value broker sent a malformed answer")
                answer = self._read(size)
            except Error as e:
                self.dead = e
                raise
            except OSError as e:
                self.dead = Error("other", f"the key-value broker connection failed: {e.strerror or e}")
                raise self.dead from None
            except BaseException:
                # KeyboardInterrupt, a signal handler's exception...: the
                # frame was cut somewhere, nothing after it can be trusted.
                self.dead = Error("other", "the key-value broker connection was interrupted mid-request")
                raise
        return answer[0], answer[1:]

    def _write(self, data):
        view = memoryview(data)
        while view:
            try:
                n = os.write(self.fd, view)
            except BlockingIOError:
                self._wait(False)
                continue
            except (BrokenPipeError, ConnectionResetError):
                raise Error("other", _EOF) from None
            view = view[n:]

    def _read(self, n):
        parts = []
        while n:
            try:
                part = os.read(self.fd, min(n, _READ_CHUNK))
            except BlockingIOError:
                self._wait(True)
                continue
            except ConnectionResetError:
                part = b""
            if not part:
                raise Error("other", _EOF)
            parts.append(part)
            n -= len(part)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def _wait(self, readable):
        # Only when something made the fd non-blocking.
        import select
        fds = [self.fd]
        if readable:
            select.select(fds, [], [])
        else:
            select.select([], fds, [])


_conn = None
_conn_lock = allocate_lock()


def _connection():
    global _conn
    if _conn is not None:
        return _conn
    with _conn_lock:
        if _conn is None:
            text = os.environ.get("MOAT_KV_FD", "")
            if not text:
                raise Error("access_denied", _DISABLED)
            try:
                fd = int(text)
                if fd < 0:
                    raise ValueError
            except ValueError:
                raise Error("other", f"MOAT_KV_FD is not a file descriptor number: {text!r}") from None
            _conn = _Connection(fd)
    return _conn


def _after_fork():
    # A lock held by another thread at fork() would stay held in the child.
    # (Parent and child still share one socket: use the store from one of them.)
    global _conn_lock
    _conn_lock = allocate_lock()
    if _conn is not None:
        _conn.lock = allocate_lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)


def _key_bytes(key):
    if not isinstance(key, str):
        raise TypeError(f"a key must be str, not {type(key).__name__}")
    try:
        data = key.encode("utf-8")
    except UnicodeEncodeError:
        raise Error("invalid", "a key must be valid UTF-8 (it has a lone surrogate)") from None
    if not data:
        raise Error("invalid", "a key must not be empty")
    if len(data) > MAX_KEY:
        raise Error("invalid", f"a key is at most {MAX_KEY} bytes of UTF-8, this one has {len(data)}")
    if b"\0" in data:
        raise Error("invalid", "a key must not contain NUL")
    return data


def _value_bytes(value):
    if isinstance(value, bytes):
        data = value
    elif isinstance(value, (bytearray, memoryview)):
        data = bytes(value)
    else:
        raise TypeError(f"a value must be bytes, not {type(value).__name__}")
    if len(data) > _MAX_FRAME - 5 - MAX_KEY:
        raise Error("invalid", f"value too large ({len(data)} bytes)")
    return data


def _fail(payload):
    """The Error of an ERROR answer: `kind message`."""
    text = bytes(payload).decode("utf-8", "replace")
    kind, _, message = text.partition(" ")
    if not kind:
        kind, message = "other", message or "the key-value broker failed"
    return Error(kind, message or kind)


def _malformed(conn, what):
    conn.dead = Error("other", f"the key-value broker sent a malformed answer ({what})")
    return Error(conn.dead.kind, conn.dead.message)


class Store:
    """An open key-value store (see `open`). Usable from several threads."""

    __slots__ = ("_conn", "_label")

    def __init__(self, conn, label):
        self._conn = conn
        self._label = label

    def __repr__(self):
        return f"<spin_sdk.key_value.Store {self._label!r}>"

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def __await__(self):
        # `await key_value.open(...)`, SDK 4's spelling: the async store
        return AsyncStore(self)
        yield   # a generator: __await__ must return an iterator

    def _call(self, op, key=b"", value=b""):
        status, payload = self._conn.call(op, key, value)
        if status == _ERROR:
            raise _fail(payload)
        if status not in (_OK, _NOT_FOUND):
            raise _malformed(self._conn, f"status {status}")
        return status, payload

    def get(self, key):
        """The value of `key` (bytes), or None when it is absent."""
        status, payload = self._call(_GET, _key_bytes(key))
        return None if status == _NOT_FOUND else payload

    def set(self, key, value):
        """Stores `value` (bytes) under `key`, replacing any value it had."""
        key = _key_bytes(key)
        self._call(_SET, key, _value_bytes(value))

    def delete(self, key):
        """Removes `key`; an absent key is not an error."""
        self._call(_DELETE, _key_bytes(key))

    def exists(self, key):
        """True when `key` has a value."""
        status, payload = self._call(_EXISTS, _key_bytes(key))
        if status == _NOT_FOUND:
            return False
        if len(payload) != 1 or payload[0] > 1:
            raise _malformed(self._conn, "EXISTS")
        return payload[0] == 1

    def get_keys(self):
        """Every key of the store, in byte order."""
        status, payload = self._call(_KEYS)
        if status == _NOT_FOUND:
            return []
        keys = []
        pos, end = 0, len(payload)
        try:
            while pos < end:
                if end - pos < 4:
                    raise ValueError
                n = int.from_bytes(payload[pos:pos + 4], "little")
                pos += 4
                if n > end - pos:
                    raise ValueError
                keys.append(payload[pos:pos + n].decode("utf-8"))
                pos += n
        except ValueError:      # UnicodeDecodeError too
            raise _malformed(self._conn, "KEYS") from None
        return keys


class AsyncStore:
    """The store as SDK 4 has it: every method is a coroutine (the I/O is
    still done synchronously when it is awaited). `get_keys` returns a
    (keys, done) pair for `spin_sdk.util.collect`."""

    __slots__ = ("_store",)

    def __init__(self, store):
        self._store = store

    def __repr__(self):
        return f"<spin_sdk.key_value.AsyncStore {self._store._label!r}>"

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    async def get(self, key):
        return self._store.get(key)

    async def set(self, key, value):
        self._store.set(key, value)

    async def delete(self, key):
        self._store.delete(key)

    async def exists(self, key):
        return self._store.exists(key)

    async def get_keys(self):
        from spin_sdk.util import _ready
        return _ready(self._store.get_keys())


def open(label):
    """Opens the store named `label`; only "default" exists here, any other
    name raises Error (kind `no_such_store`). `await open(label)` gives the
    AsyncStore of Spin's SDK 4 instead."""
    if not isinstance(label, str):
        raise TypeError(f"a store label must be str, not {type(label).__name__}")
    conn = _connection()
    try:
        name = _key_bytes(label)
    except Error:
        raise Error("no_such_store", f"no key-value store is named {label!r}") from None
    status, payload = conn.call(_OPEN, name)
    if status == _ERROR:
        raise _fail(payload)
    if status != _OK:
        raise _malformed(conn, f"OPEN status {status}")
    return Store(conn, label)


def open_default():
    """Opens the store "default" (`await open_default()`: an AsyncStore)."""
    return open("default")
