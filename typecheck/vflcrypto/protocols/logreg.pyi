# See __init__.pyi.
from protocols.logreg import *
