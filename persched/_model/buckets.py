"""Owner buckets: the stored key that ownership is computed from.

Every job row carries ``owner_bucket``, a number in ``0 .. BUCKETS - 1``
hashed from its job_id alone (`bucket_of`), written when the row is inserted
or replaced. Several instances sharing a namespace own whole buckets
(`persched._engine.membership`), so a refill asks the database for the rows
of its own buckets only. The hash must never change: the rows keep it.
"""

from __future__ import annotations

from hashlib import blake2b
from typing import Final

__all__ = ["BUCKETS", "bucket_of"]

#: How many buckets the job ids fall into (a stored value: never changed).
BUCKETS: Final = 1024


def bucket_of(job_id: str) -> int:
    """The owner bucket of `job_id`: the first 8 bytes of its BLAKE2b, modulo `BUCKETS`."""
    digest = blake2b(job_id.encode(errors="surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "big") % BUCKETS
