"""Declares the compiled core; all metadata lives in setup.cfg.

Every ``scrapy_simdup/_ext/*.pyx`` is one extension module. Compiler directives are
in each ``.pyx`` header so ``cythonize -i`` on a single file builds it the same.
"""
import glob
import os
import platform

import lxml
from Cython.Build import cythonize
from setuptools import Extension, setup

compile_args = ["-O3"]
if platform.machine() in ("x86_64", "AMD64") and os.name != "nt":
    # hardware popcount: every x86-64 CPU since 2008 has it.
    compile_args.append("-mpopcnt")

extensions = [
    Extension(
        "scrapy_simdup._ext." + os.path.splitext(os.path.basename(path))[0],
        [path],
        extra_compile_args=compile_args,
        # _scan walks lxml's libxml2 nodes through lxml's public C API
        include_dirs=lxml.get_include(),
        depends=sorted(glob.glob(os.path.join("scrapy_simdup", "_ext", "*.h"))),
    )
    for path in sorted(glob.glob(os.path.join("scrapy_simdup", "_ext", "*.pyx")))
]

setup(ext_modules=cythonize(extensions, language_level=3))
