"""``KeyHashes``: whether each hash of a batch was added by an earlier batch — the same answer as a
set of every hash added, whatever the order of a batch's hashes and however its runs are merged."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from service.billing.keyhashes import KeyHashes

batches = st.lists(st.lists(st.integers(0, 2**64 - 1) | st.integers(0, 40), max_size=30), max_size=40)


@settings(max_examples=200, deadline=None)
@given(batches)
def test_seen_is_a_set_of_every_hash_added(chunks: list[list[int]]) -> None:
    hashes, added = KeyHashes(), set[int]()
    for chunk in chunks:
        batch = np.array(chunk, dtype=np.uint64)
        assert hashes.seen(batch).tolist() == [h in added for h in chunk]
        hashes.add(batch)
        added.update(chunk)
    assert hashes.count == sum(len(c) for c in chunks)
