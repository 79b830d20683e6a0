# See __init__.pyi.
from protocols._train import *
