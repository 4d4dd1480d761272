"""Stand-ins for the outside world: the scripted model server and its scenarios, a fake Slack
Web API, and the demo travel and booking services with their tools.  The runtime never
imports these; the operator tools and tests start them."""
