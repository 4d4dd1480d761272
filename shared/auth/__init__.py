"""Who may do what, decided from the deployment, never from a message.

The building blocks for trusting a run's identity (signed by a submitting service the deployment
registered, or vouched for by an identity provider's token) and a person's decision (signed by a
key the deployment knows for that person): Ed25519 key files, the deployment's trust file, token
signing and verification (PyJWT), and a local keyring that makes one machine work with zero
configuration.  Everything here is pure: no Redis, no network, time passed in.
"""
