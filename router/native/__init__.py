"""The compiled per-record path: the C extension (_fastpath.c, its headers and its stub) and the
module that sets it up and says which records it decides (compiled)."""
