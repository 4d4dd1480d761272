"""The durable ledger on Redis: guarded atomic steps (`steps`, `tx`, `lua/apply.lua`), the
reads (`store`), and the transport the hot commands travel on (`wire`, `pipeline`)."""
