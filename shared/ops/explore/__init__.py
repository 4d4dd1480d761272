"""The schedule explorer (`callgate explore`): every worker in one process, each next event
chosen from a seed, the invariants checked after every one (README: How exactly-once is tested).
"""
