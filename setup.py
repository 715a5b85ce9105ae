"""The one compiled part: the sandbox's spawner loop (runner/expr/_spawnc*.c), Linux only and
optional. It is built twice: a program of its own, `runner/expr/_spawnc_exec`, which bubblewrap
starts (no interpreter: ~1 ms), and a Python module, `runner.expr._spawnc`, for where the program
cannot run (it also marks the wheel as this platform's). Where neither can be built (no C
compiler) the spawner runs its Python loop instead: the same protocol at ~0.5 ms more a command.
Everything else is in pyproject.toml."""

import os
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

LOOP = ["runner/expr/_spawnc.c", "runner/expr/_spawnc_rules.c"]
HEADERS = ["runner/expr/_spawnc.h"]
PROGRAM = "_spawnc_exec"


class BuildWithProgram(build_ext):
    """build_ext, and the spawner's program beside the module it builds (in the build tree,
    copied into the source tree as the module is for an editable install); a failure is a
    warning, as for the optional module."""

    def run(self) -> None:
        super().run()
        if self.extensions and self._program() and self.inplace:
            # beside it, then renamed over it: a spawner running the old one keeps it whole
            # (writing over a running program fails: ETXTBSY)
            target = self._in_place()
            self.copy_file(self._built(), target + ".new")
            os.replace(target + ".new", target)

    def _built(self) -> str:
        module = self.get_ext_filename(self.get_ext_fullname(self.extensions[0].name))
        return os.path.join(self.build_lib, os.path.dirname(module), PROGRAM)

    def _in_place(self) -> str:
        package = self.extensions[0].name.rpartition(".")[0]
        folder = self.get_finalized_command("build_py").get_package_dir(package)
        return os.path.join(folder, PROGRAM)

    def _program(self) -> bool:
        from setuptools.errors import CCompilerError, CompileError, LinkError

        target = self._built()
        try:
            objects = self.compiler.compile(
                ["runner/expr/_spawnc_main.c", *LOOP],
                output_dir=os.path.join(self.build_temp, "program"),
                depends=HEADERS,
            )
            self.compiler.link_executable(
                objects, os.path.basename(target), output_dir=os.path.dirname(target)
            )
        except (CCompilerError, CompileError, LinkError, OSError) as exc:
            self.warn(f"the sandbox spawner's program was not built ({exc}): its module runs")
            return False
        return True

    def get_outputs(self) -> list[str]:
        outputs = list(super().get_outputs())
        if self.extensions and os.path.exists(self._built()):
            outputs.append(self._built())
        return outputs

    def get_output_mapping(self) -> dict[str, str]:
        mapping = dict(super().get_output_mapping())
        if self.extensions and self.inplace and os.path.exists(self._built()):
            mapping[self._built()] = self._in_place()
        return mapping


extensions = []
if sys.platform.startswith("linux"):
    extensions.append(
        Extension(
            "runner.expr._spawnc",
            ["runner/expr/_spawnc_module.c", *LOOP],
            depends=[*HEADERS, "runner/expr/_spawnc_main.c"],
            optional=True,
        )
    )

setup(ext_modules=extensions, cmdclass={"build_ext": BuildWithProgram})
