"""The Slack approvals bot, split by responsibility (DESIGN §7).

`settings` (configuration), `messages` (pure Block Kit builders and the button value codec),
`notifications` (the consumer of approval-requested / unknown-outcome notifications),
`clicks` (verifying who clicked and posting the decision) and `app` (the Bolt app and its
aiohttp server).  `services/slack_approvals.py` (``python -m callgate.services.slack_approvals``)
is the process entry point.
"""
