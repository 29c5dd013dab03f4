"""A minimal binding of libnftables (the library behind the `nft` tool), through ctypes.

Shared by the two owners of objects in the agent's table `inet vswitch-cni`: the NAT
(`hostnat/`) and the NetworkPolicy renderer (`nftpolicy/`). Each replaces only its own objects;
`table_lock` serializes the owners' read-then-write sequences in this process.

The agent hands nftables whole JSON documents (`nft -j` syntax) in one call; libnftables applies
each document as one transaction, so a rule set is replaced atomically and a failure changes
nothing. In-process, so no command line is ever built and no `nft` process is spawned; the
netlink socket is opened by the calling thread, in its network namespace.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import threading
from typing import Any

NFT_CTX_DEFAULT = 0
NFT_CTX_OUTPUT_JSON = 1 << 4
LIBRARY = "libnftables.so.1"


# Held around every change of the shared table whose content depends on a read of it (which of
# one owner's objects exist), so that the other owner's transaction cannot slip in between.
table_lock = threading.RLock()


class NftError(Exception):
    """nftables refused a document, or libnftables is not installed."""


_lib: ctypes.CDLL | None = None
_lib_lock = threading.Lock()


def _library() -> ctypes.CDLL:
    global _lib
    with _lib_lock:
        if _lib is None:
            try:
                lib = ctypes.CDLL(ctypes.util.find_library("nftables") or LIBRARY)
            except OSError as exc:
                raise NftError(
                    f"{LIBRARY} is missing: install Debian's nftables package ({exc})"
                ) from exc
            lib.nft_ctx_new.restype = ctypes.c_void_p
            lib.nft_ctx_new.argtypes = [ctypes.c_uint32]
            lib.nft_ctx_free.argtypes = [ctypes.c_void_p]
            lib.nft_ctx_output_set_flags.argtypes = [ctypes.c_void_p, ctypes.c_uint]
            lib.nft_ctx_buffer_output.argtypes = [ctypes.c_void_p]
            lib.nft_ctx_buffer_error.argtypes = [ctypes.c_void_p]
            lib.nft_ctx_get_output_buffer.restype = ctypes.c_char_p
            lib.nft_ctx_get_output_buffer.argtypes = [ctypes.c_void_p]
            lib.nft_ctx_get_error_buffer.restype = ctypes.c_char_p
            lib.nft_ctx_get_error_buffer.argtypes = [ctypes.c_void_p]
            lib.nft_run_cmd_from_buffer.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
            _lib = lib
        return _lib


def run(commands: list[dict[str, Any]]) -> dict[str, Any]:
    """Runs `{"nftables": commands}` as one transaction; returns nftables' JSON answer ({} when
    it printed nothing). Raises NftError with nftables' own message."""
    lib = _library()
    ctx = lib.nft_ctx_new(NFT_CTX_DEFAULT)
    if not ctx:
        raise NftError("nft_ctx_new failed")
    try:
        lib.nft_ctx_output_set_flags(ctx, NFT_CTX_OUTPUT_JSON)
        lib.nft_ctx_buffer_output(ctx)
        lib.nft_ctx_buffer_error(ctx)
        rc = lib.nft_run_cmd_from_buffer(ctx, json.dumps({"nftables": commands}).encode())
        out = (lib.nft_ctx_get_output_buffer(ctx) or b"").decode()
        if rc != 0:
            err = (lib.nft_ctx_get_error_buffer(ctx) or b"").decode().strip()
            raise NftError(err or f"nftables returned {rc}")
        return json.loads(out) if out.strip() else {}
    finally:
        lib.nft_ctx_free(ctx)
