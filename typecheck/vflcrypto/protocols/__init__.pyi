# Type-checking alias, read by mypy only (pyproject [tool.mypy] mypy_path): the folder
# protocols/ is installed as vflcrypto.protocols (setuptools package-dir), which mypy cannot
# map, so it checks that folder as the top-level package "protocols" and this stub package
# re-exports it under its real name. One file per subpackage that code imports from.
from protocols import *
