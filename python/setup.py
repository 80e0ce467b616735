"""Packs python/ccl with a copy of include/ccl.h (the torch backend is
compiled against it, at its first import, with the installed PyTorch)."""
import os
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py


class with_header(build_py):
    def run(self):
        super().run()
        here = os.path.dirname(os.path.abspath(__file__))
        src = os.path.join(here, "..", "include", "ccl.h")
        if os.path.exists(src):
            dst = os.path.join(self.build_lib, "ccl", "include")
            os.makedirs(dst, exist_ok=True)
            shutil.copy(src, dst)


setup(cmdclass={"build_py": with_header})
