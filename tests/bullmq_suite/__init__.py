"""BullMQ's own Python test suite, run through the facade (``./run bullmq-suite REPO``).

Not part of ``./run test``: it needs a copy of ``taskforcesh/bullmq`` (a clone or a bare
mirror). ``run.py`` takes ``python/tests`` at the release PORTING.md names, resolves
``import bullmq`` to ``bullmq_compat`` through ``shim/``, gives each test a freshly migrated
schema, and compares the outcome with the tests PORTING.md excludes (those that read Redis
keys or call the real package's private helpers). None of BullMQ's code is copied here.
"""
