"""Every file scrapy-simdup writes gets the mode ``open()`` would give it:
``0o666`` less the umask (batch files were 0600 beside 0644 index files)."""
import os
import stat

import numpy as np
import pytest

from scrapy_simdup.fingerprint.idf import IdfTable
from scrapy_simdup.index.snapshot import IndexStore
from scrapy_simdup.merge import merge
from scrapy_simdup.storage import atomic
from scrapy_simdup.storage.batchwriter import BatchWriter
from tests.batch_pages import features_page


@pytest.fixture(params=[0o027, 0o002])
def umask(request):
    old = os.umask(request.param)
    yield request.param
    os.umask(old)


def test_batch_index_idf_and_collection_files_follow_the_umask(tmp_path, umask):
    d = tmp_path / "crawl"
    rng = np.random.default_rng(1)
    values, keys = [], []
    with BatchWriter(d, batch_size=5) as w:
        for i in range(12):
            page = features_page([f"w{int(x)}" for x in rng.integers(0, 1000, 50)])
            w.append(page, f"https://example.com/{i}")
            values.append(page.value)
            keys.append(f"https://example.com/{i}")
    IndexStore(d).append(np.array(values, dtype=np.uint64), keys, {"distance": 3})
    IdfTable().save(d / "idf-00000.bin")
    merge([d], distance=3, pairs_out=tmp_path / "pairs.jsonl",
          clusters_out=tmp_path / "clusters.jsonl")
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    kinds = {p.name.split("-")[0] if p.name.startswith(("batch-", "idf-")) else p.name
             for p in files}
    assert {"batch", "index.json", "index.values", "index.keys", "idf", "collection.json",
            "H.bin", "urls.bin", "urls.idx", "pairs.bin", ".lock", "pairs.jsonl",
            "clusters.jsonl"} <= kinds, kinds
    modes = {str(p.relative_to(tmp_path)): oct(stat.S_IMODE(p.stat().st_mode)) for p in files}
    assert set(modes.values()) == {oct(0o666 & ~umask)}, modes


def test_the_umask_is_read_without_changing_it(monkeypatch, umask):
    assert atomic.new_file_mode() == 0o666 & ~umask
    assert os.umask(umask) == umask          # unchanged by the read
    # without /proc: the umask the process had when scrapy-simdup was imported
    monkeypatch.setattr(atomic, "_proc_umask", lambda: None)
    assert atomic.new_file_mode() == 0o666 & ~atomic._IMPORT_UMASK
