"""The scripted model server's parts: scenario scripts, history rules, three wire renderers.

`shared/standins/scripted_model.py` is the entry point
(``python -m callgate.standins.scripted_model``); this package holds the pieces so each stays small:

* `common`    – the protocol-neutral `Turn` a step renders into, ids, fragmenting, `ApiError`.
* `scenario`  – the JSON scenario format (documented there), step selection, fault counters.
* `history`   – what the conversation so far looks like, read from each protocol's request.
* `rules`     – the providers' own history rules with their exact 400 bodies (pure).
* `wire_responses`, `wire_chat`, `wire_anthropic` – JSON bodies and SSE streams per protocol.
* `server`    – the aiohttp app, fault injection on the transport, the request log.
"""
