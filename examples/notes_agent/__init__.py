"""An agent of your own in ten minutes: two tools, the service they talk to, a scripted model.

`notes_agent.tools` declares the tools, `notes_agent.service` is the notes service behind them,
``scenarios/`` scripts the local model.  Import it with ``examples/`` on ``PYTHONPATH`` (the
README's "Build your own agent" section).
"""
