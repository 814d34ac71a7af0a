"""The two bounds a test may put on waiting. Neither is a verdict on speed: both only end a wait for
something that is not coming, and every wait returns as soon as its event happens, so a bound costs
nothing when all is well. Timings belong in ``benchmarks/``.

Kept in a module of its own, free of imports, so that the SGLang children (``sglang_cpu``) can use
them without importing the test suite's fixtures.
"""

# How long a wait for something that must happen (a frame, a line on screen, a file) may take before
# the test calls it missing. It has to outlast a 2-core CI box that other work is loading: 5 s was not
# enough for a refresh to come round there, and 60 s not always enough for a busy child.
PATIENCE_S = 120.0

# How long a child process (a CLI run, an SGLang child, a server) may run before the test calls it
# hung and kills it. A loaded box ran one SGLang child for over 240 s; this is far beyond any load.
HANG_GUARD_S = 1800.0
