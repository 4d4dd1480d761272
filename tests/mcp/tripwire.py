"""A module no deployment names: importing it means something other than the deployment's
server list chose code to run (tests/unit/test_mcp_policy.py checks it never is)."""

raise AssertionError("tests.mcp.tripwire was imported")
