# See __init__.pyi.
from protocols._repvfl_cli import *
from protocols._repvfl_cli import _digits_tables as _digits_tables
