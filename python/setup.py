"""setup.py - the `hmoe` Python package: builds libhmoe (CPU-only, with CMake, from this
repository) and the C extension hmoe._hmoe over it. `pip install ./python` or
`pip wheel ./python` from the repository root."""
import os
import subprocess

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, ".."))


class BuildWithLibhmoe(build_ext):
    def run(self):
        bdir = os.path.join(os.path.abspath(self.build_temp), "libhmoe")
        os.makedirs(bdir, exist_ok=True)
        subprocess.check_call(["cmake", "-S", ROOT, "-B", bdir, "-DCMAKE_BUILD_TYPE=Release",
                               "-DHMOE_CUDA=OFF", "-DCMAKE_POSITION_INDEPENDENT_CODE=ON"],
                              stdout=subprocess.DEVNULL)
        subprocess.check_call(["cmake", "--build", bdir, "--target", "hmoe", "-j",
                               str(os.cpu_count() or 2)])
        for ext in self.extensions:
            ext.extra_objects = [os.path.join(bdir, "libhmoe.a")]
        super().run()


setup(
    name="hmoe",
    version="0.1.0",
    description="hmoe's CPU expert engine for GPU frameworks (a drop-in for kt-kernel's KTMoEWrapper)",
    packages=["hmoe"],
    ext_modules=[Extension(
        "hmoe._hmoe", sources=["hmoe/_hmoe.c"],
        include_dirs=[os.path.join(ROOT, "include"), os.path.join(ROOT, "src")],
        define_macros=[("_GNU_SOURCE", None)],
        extra_compile_args=["-std=c11", "-O2", "-Wall", "-Wno-unused-parameter"],
        # libhmoe's dependencies, shared (Debian's static archives are not built for shared objects)
        libraries=["jansson", "pcre2-8", "z", "pthread", "m", "dl"])],
    cmdclass={"build_ext": BuildWithLibhmoe},
    python_requires=">=3.8",
)
