# See __init__.pyi.
from protocols.exchange import *
