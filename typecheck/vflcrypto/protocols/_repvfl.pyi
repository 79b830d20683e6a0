# See __init__.pyi.
from protocols._repvfl import *
