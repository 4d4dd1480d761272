"""Operator tools: the CLI, traces, a local deployment (supervisor, embedded Redis), the demo,
the benchmark, chaos and the conformance matrix.  The runtime never imports these."""
