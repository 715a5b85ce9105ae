"""The one compiled part: the sandbox's spawner loop (runner/expr/_spawnc.c), Linux only and
optional -- where it cannot be built (no C compiler) the spawner runs its Python loop instead,
the same protocol at ~0.5 ms more a command. Everything else is in pyproject.toml."""

import sys

from setuptools import Extension, setup

extensions = []
if sys.platform.startswith("linux"):
    extensions.append(
        Extension(
            "runner.expr._spawnc",
            ["runner/expr/_spawnc.c", "runner/expr/_spawnc_rules.c"],
            depends=["runner/expr/_spawnc.h"],
            optional=True,
        )
    )

setup(ext_modules=extensions)
