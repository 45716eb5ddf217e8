"""The compiled per-record path (router/native/_fastpath.c: router.native.compiled says why).
Optional: without a C compiler the build goes on and the router runs the same rule interpreted;
`cutover doctor` and the worker's start-up log say which path runs.

The example jobs (examples/jobs) ship inside the package as ``cutover/demo_jobs``, so that
``cutover demo`` from an installed wheel finds the jobs it runs (cutover.cli.demo.JOBS)."""

from setuptools import Extension, find_packages, setup

setup(packages=[*find_packages(include=["cutover*", "router*", "spark_tagger*"]),
                "cutover.demo_jobs"],
      package_dir={"cutover.demo_jobs": "examples/jobs"},
      ext_modules=[Extension("router.native._fastpath", ["router/native/_fastpath.c"],
                             depends=["router/native/_blake2b.h", "router/native/_plugin.h",
                                      "router/native/_produce.h"],
                             extra_compile_args=["-O2", "-std=gnu11"], optional=True)])
