# See __init__.pyi.
from protocols.poisson import *
