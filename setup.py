# The project metadata lives in pyproject.toml; setup.py exists only because cffi's
# out-of-line build hooks in through setuptools' `cffi_modules` argument.
from setuptools import setup

setup(cffi_modules=["infinigram_hf/_cffi_build.py:ffibuilder"])
