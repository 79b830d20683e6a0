# See __init__.pyi.
from protocols.align import *
