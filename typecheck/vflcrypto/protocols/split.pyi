# See __init__.pyi.
from protocols.split import *
