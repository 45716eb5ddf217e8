"""The compiled per-record path (router/_fastpath.c: router.compiled says why). Optional: without
a C compiler the build goes on and the router runs the same rule interpreted; `cutover doctor`
and the worker's start-up log say which path runs."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("router._fastpath", ["router/_fastpath.c"],
                             depends=["router/_blake2b.h", "router/_message.h",
                                      "router/_produce.h"],
                             extra_compile_args=["-O2", "-std=gnu11"], optional=True)])
