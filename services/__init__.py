"""The worker processes, one module each: ``python -m callgate.services.<name>``.

Installed as ``callgate.services``; imported under any other name it refuses.
"""

if __name__ != "callgate.services":
    raise ImportError(f"this folder is callgate.services; import that, not {__name__}")
