"""BPHSIndex equals brute force exactly (all tables layouts, pending list)."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scrapy_simdup import BPHSIndex
from tests.reference.index import clustered_values, ref_matches


@settings(max_examples=30)
@given(seed=st.integers(0, 2**32 - 1), h=st.integers(0, 4), layout=st.integers(0, 2),
       chunks=st.integers(1, 3), lookup=st.sampled_from(["offsets", "binary"]))
def test_equals_brute_force(seed, h, layout, chunks, lookup):
    rng = np.random.default_rng(seed)
    stored = clustered_values(rng, 15, 1500, h + 1)
    queries = clustered_values(rng, 15, 25, h + 1)
    blocks = [None, h + 2, h + 3][layout]
    idx = BPHSIndex(distance=h, blocks=blocks, lookup=lookup)
    ids = np.concatenate([idx.add(p) for p in np.array_split(stored, chunks)])
    qi, got_ids, got_d = idx.query_many(queries, first=False)
    firsts, first_d = idx.query_many(queries, first=True)
    for k, q in enumerate(queries):
        want, _ = ref_matches(stored, ids, q, h)
        got = list(zip(got_ids[qi == k].tolist(), got_d[qi == k].tolist()))
        assert sorted(got) == want and len(got) == len(set(got))
        assert sorted(idx.query(int(q), first=False)) == want
        if want:
            assert (int(firsts[k]), int(first_d[k])) in want
            assert idx.query(int(q))[0] in want
        else:
            assert firsts[k] == -1 and idx.query(int(q)) == []


def test_tables_argument():
    assert BPHSIndex(3, tables=4).blocks == 4
    idx = BPHSIndex(3, tables=10)
    assert idx.blocks == 5 and idx.tables == 10
    with pytest.raises(ValueError, match="tables"):
        BPHSIndex(3, tables=7)
    with pytest.raises(ValueError, match="blocks"):
        BPHSIndex(3, blocks=3)
    with pytest.raises(ValueError, match="distance"):
        BPHSIndex(25)
    with pytest.raises(ValueError, match="value"):
        idx.query(-3)
    with pytest.raises(ValueError, match="lookup"):
        BPHSIndex(3, lookup="hash")
