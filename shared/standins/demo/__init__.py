"""The demo's tools and the stand-in services behind them.

`travel` (two reads over the travel service), `workshop` (reads and a reservation that needs
an approval, over the booking service) and `holds` (an idempotent write over the same
service).  A local deployment registers all three unless told otherwise.
"""

TRAVEL = "callgate.standins.demo.travel"
WORKSHOP = "callgate.standins.demo.workshop"
HOLDS = "callgate.standins.demo.holds"
TOOL_MODULES = (TRAVEL, WORKSHOP, HOLDS)
"""The modules `callgate up`, the demo, conformance and chaos register by default."""
FAULTY = "callgate.standins.demo.faulty"
"""Tools whose own code raises (the tool-error cases); test deployments add it."""
