"""The wheel's version: `project(dlfuse VERSION x.y.z)` of the dlfuse CMake project, read
where wheel/CMakeLists.txt finds that project (project/ in an unpacked sdist, else the
repository around bindings/python). A scikit-build-core dynamic-metadata provider
(pyproject.toml's [[tool.dynamic-metadata]]), run from bindings/python."""
import re
from pathlib import Path

_PROJECT = re.compile(r"^project\(dlfuse VERSION ([0-9]+\.[0-9]+\.[0-9]+)", re.MULTILINE)


def dynamic_metadata(settings, project):
    for cmakelists in (Path("project/CMakeLists.txt"), Path("../../CMakeLists.txt")):
        if cmakelists.is_file():
            match = _PROJECT.search(cmakelists.read_text(encoding="utf-8"))
            if not match:
                raise RuntimeError(f"{cmakelists} has no `project(dlfuse VERSION x.y.z)`")
            return {"version": match.group(1)}
    raise FileNotFoundError("the dlfuse CMake project is neither in project/ nor in ../..")
