# See __init__.pyi.
from protocols.hfl import *
