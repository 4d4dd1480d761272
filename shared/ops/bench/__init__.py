"""`callgate bench`: the runtime's own cost, measured beside a raw Redis relay (the floor).

Modules: `tools` (the benchmark's tools), `provider` (the in-process scripted provider),
`floor` (the raw relay), `harness` (systems, runs, Redis), one module per scenario group
(`latency`, `throughput`, `executors`, `memory`), `report` (targets and the table), `cli`.
"""
