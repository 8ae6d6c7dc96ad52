"""The links that put the card's top-level folders inside the one package: weightsearch/trainer
-> ../trainer, and so on. A checkout made without symbolic links (Git's core.symlinks=false,
Windows' default, some archive tools) has small text files in their place; importing then
fails far from the cause, and a wheel built from it would lack the packages. `problems` names
each broken link and the fix; the package's import and the build (setup.py) refuse with it.

Plain Python, no imports from the project: setup.py runs it before anything is installed."""

from __future__ import annotations

import os

LINKED = ("recommender", "service", "studies", "sweep", "trainer")
FIX = ("check the repository out with symbolic links (`git config core.symlinks true`, then "
       "`git checkout -f`; on Windows enable Developer Mode or use WSL), or install the built "
       "wheel instead of the checkout")


def problems(package_dir: str) -> list[str]:
    """One line per link of `package_dir` that is not a folder link to its top-level folder;
    empty for an installed package (real folders there) and a healthy checkout."""
    found = []
    root = os.path.dirname(os.path.abspath(package_dir))
    for name in LINKED:
        path = os.path.join(package_dir, name)
        if os.path.islink(path):
            if os.path.realpath(path) != os.path.realpath(os.path.join(root, name)):
                found.append(f"weightsearch/{name} links to {os.readlink(path)}, not to "
                             f"../{name}")
            elif not os.path.isdir(path):
                found.append(f"weightsearch/{name} links to ../{name}, which is missing")
        elif os.path.isfile(path):
            found.append(f"weightsearch/{name} is a file, not a link to the folder ../{name}")
        elif not os.path.isdir(path):
            found.append(f"weightsearch/{name} is missing")
    return found


def message(found: list[str]) -> str:
    return ("this weightsearch checkout is broken: " + "; ".join(found) + ". Fix: " + FIX)
