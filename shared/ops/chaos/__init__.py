"""`callgate chaos`: the whole system under real faults, then invariants checked from the
authoritative sides (the booking service, the ledger, what the model received).

Modules, one job each:

* `workload`   — the mix of runs (pure);
* `boundaries` — every deterministic crash point, and which effect kinds reach it (pure);
* `approver`   — a simulated approver posting decisions on the approvals stream;
* `people`     — the run's user cancelling, a resolver settling unknown outcomes (signed too);
* `recovery`   — what a killed worker held, and when a live one had taken it all up;
* `injector`   — SIGKILLs at random moments, one Redis restart;
* `facts`      — collecting the facts at the end (I/O);
* `invariants` — the checks, pure functions over those facts;
* `report`     — figures as data and as text;
* `session`    — one system, a workload, the approver, settling: shared by both modes;
* `run`        — the random-fault run;  `walk` — the crash-point walk;  `cli` — the command.
"""
