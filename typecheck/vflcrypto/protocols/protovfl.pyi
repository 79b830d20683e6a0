# See __init__.pyi.
from protocols.protovfl import *
