"""Conformance: the regression catalogue (`catalogue.py`) × the three protocols, end to end.

`catalogue` (the cases as data) → `runner` (one real deployment; `drive` runs each cell and
`probes` reads the demo services and the model server's log) → `checker` (pure: observation
vs expectation) → `report` (matrix text, JSON); `cli` adds ``callgate conformance``.
"""
