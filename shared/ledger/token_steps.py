"""The ledger step that makes an end user's identity token single-use.

Its own step, outside the run's atomic start: the key is the token's, not the run's partition's
(`Keys.identity_token_use`), so every run started with the token meets it.  Recorded before the
run is created; a job that then fails has used its token up, which only costs its user a new one.
"""

from __future__ import annotations

from callgate.ledger.reads import Reads


class TokenSteps(Reads):
    """Identity tokens, used once."""

    async def use_identity_token(self, token_id: str, run_id: str, expires_ms: int) -> str:
        """Record that ``token_id`` starts ``run_id``, kept until ``expires_ms``; the run it
        starts, which is another than ``run_id`` if it was used before.  The same run again (a
        redelivered job) finds itself."""
        key = self.keys.identity_token_use(token_id)
        first = await self._client(self.redis.set(key, run_id, nx=True, get=True, pxat=expires_ms))
        if first is None:
            return run_id
        return first.decode() if isinstance(first, bytes) else str(first)
