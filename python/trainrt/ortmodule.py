"""ORTModule compatibility: an ORTModule script migrates by changing one import.

    from trainrt.ortmodule import ORTModule, DebugOptions, LogLevel
"""

from trainrt.options import DebugOptions, LogLevel  # noqa: F401
from trainrt.rtmodule import RTModule as ORTModule  # noqa: F401
