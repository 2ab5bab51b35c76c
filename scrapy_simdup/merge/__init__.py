"""Batch mode: merge the crawls' batch files into one on-disk collection and find every near-duplicate.

:mod:`~scrapy_simdup.merge.collection` is the collection (format, lock,
commit), :mod:`~scrapy_simdup.merge.probes` sizes and computes the probes,
:mod:`~scrapy_simdup.merge.matchers` holds the matchers (PSM-F, PSM-A,
exact BPHS), :mod:`~scrapy_simdup.merge.batchscan` the steps of matching
one batch, :mod:`~scrapy_simdup.merge.run` the merge driver,
:mod:`~scrapy_simdup.merge.distributed` its batches matched on Dask
(through the directories of :mod:`~scrapy_simdup.merge.sharedir`),
:mod:`~scrapy_simdup.merge.report` the summary and the ``--pairs`` and
``--clusters`` files, :mod:`~scrapy_simdup.merge.output` how those files
are written, and :mod:`~scrapy_simdup.merge.inspect` ``stats``. Other
layers use the names re-exported here.
"""
from scrapy_simdup.merge.inspect import stats
from scrapy_simdup.merge.probes import MAX_MERGE_PROBES
from scrapy_simdup.merge.run import crawl_distance, merge

__all__ = ["MAX_MERGE_PROBES", "crawl_distance", "merge", "stats"]
