# See __init__.pyi.
from protocols.linreg import *
