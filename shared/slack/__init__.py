"""The Slack approvals bot, split by responsibility (DESIGN §7).

`settings` (configuration), `messages` (pure Block Kit builders and the button value codec),
`notifications` (the consumer of approval-requested / unknown-outcome notifications),
`clicks` (verifying who clicked Approve/Deny and posting the decision), `resolutions` (the
same for Applied / Not applied / Recheck on an unknown outcome, and showing the verdict),
`replies` (what both answer a click with), `records` (read-only views of the validator's
records) and `bot` (the Bolt app and its aiohttp server).
`services/slack_approvals.py` (``python -m callgate.services.slack_approvals``) is the process
entry point.
"""
