"""Declares the compiled core; all metadata lives in setup.cfg.

Every ``scrapy_simdup/_ext/*.pyx`` is one extension module; the larger ones
``include`` parts from ``.pxi`` files, and the C headers' declarations are
``.pxd`` files beside them. Compiler directives are in each ``.pyx`` header so
``cythonize -i`` on a single file builds it the same.
"""
import glob
import os
import platform

import lxml
from Cython.Build import cythonize
from setuptools import Extension, setup

EXT = os.path.join("scrapy_simdup", "_ext")
# A change to any C header or .pxd rebuilds every module (a header may include
# another, which Cython's dependency scan does not follow); a change to a .pxi
# part, named <module>_<part>.pxi, rebuilds its module.
SHARED = sorted(glob.glob(os.path.join(EXT, "*.h")) + glob.glob(os.path.join(EXT, "*.pxd")))

compile_args = ["-O3"]
if platform.machine() in ("x86_64", "AMD64") and os.name != "nt":
    # hardware popcount: every x86-64 CPU since 2008 has it.
    compile_args.append("-mpopcnt")

extensions = [
    Extension(
        "scrapy_simdup._ext." + name,
        [os.path.join(EXT, name + ".pyx")],
        extra_compile_args=compile_args,
        # htmlscan walks lxml's libxml2 nodes through lxml's public C API
        include_dirs=lxml.get_include(),
        depends=SHARED + sorted(glob.glob(os.path.join(EXT, name + "_*.pxi"))),
    )
    for name in sorted(os.path.splitext(os.path.basename(path))[0]
                       for path in glob.glob(os.path.join(EXT, "*.pyx")))
]

setup(ext_modules=cythonize(extensions, language_level=3))
