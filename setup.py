"""The build refuses a checkout whose package links are not links (weightsearch/_links.py): a
wheel built from it would lack most of the packages. Everything else is in pyproject.toml."""

import os
import sys

from setuptools import setup

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "weightsearch"))
import _links  # a plain module beside the package, importable before it is installed

_found = _links.problems(os.path.join(os.path.dirname(os.path.abspath(__file__)), "weightsearch"))
if _found:
    sys.exit(f"error: {_links.message(_found)}")
setup()
