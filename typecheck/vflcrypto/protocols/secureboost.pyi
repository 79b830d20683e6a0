# See __init__.pyi.
from protocols.secureboost import *
