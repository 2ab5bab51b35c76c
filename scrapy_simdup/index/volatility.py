"""Bit volatility: how likely a near-duplicate page differs in each simhash bit.

Model (Sood & Loguinov 2011, section 3). When a page is edited, bit weight
``W[j]`` moves to ``W'[j] = W[j] + Y_j``. Bit ``j`` flips iff the change
crosses zero against the sign of ``W[j]``, so with ``Y`` symmetric around 0::

    p_j = P(Y > |W[j]|) = 0.5 * P(|Y| > |W[j]|)

How it is estimated (``VolatilityModel.fit``):

* The scale of ``W`` grows with the number and weights of a page's features,
  so everything is *normalised* by ``rms(W) = sqrt(mean_j W[j]**2)`` of the
  original page (it estimates the standard deviation of ``W[j]`` for that page):
  ``c_j = |W[j]| / rms(W)`` and ``y = |W'[j] - W[j]| / rms(W)``. With this
  normalisation the fitted distribution of ``y`` is the same for short and long
  pages when the edited fraction is the same (checked by
  ``benchmarks/calibrate_volatility.py``, which prints it per page-size bin).
* The samples of ``y`` come from pairs (page, edited variant) whose
  fingerprints are real simhash computations and lie within the Hamming
  distance the index searches (the pairs a search must find).
* ``P(|Y| > y)`` is the empirical survival function on a grid up to its
  99.9th percentile, and beyond it an exponential (Laplace) tail whose rate is
  the maximum-likelihood fit to the excesses over the 95th percentile (the
  paper finds exponential tails).
* The index only needs ``log(p / (1 - p))`` (VOSH's keys): it is tabulated on
  the grid and interpolated linearly in C, with a linear extension (the
  exponential tail) beyond it.
* ``probes_for_recall``: for the same pairs, ``fit_probes`` runs VOSH on the
  original's weights with ``t`` header bits and records at which probe the
  variant's header is reached; the table keeps, per ``distance`` and ``t``,
  the number of probes that reaches each recall level. It is an
  all-matches (PSM-A) recall for one near-duplicate per query, so it is
  conservative for PSM-F.

The default model ships as ``data/volatility_default.json``, produced by
``python benchmarks/calibrate_volatility.py`` (see its docstring).
"""
from __future__ import annotations

import json
import math
import os
from typing import Any

import numpy as np

from scrapy_simdup._ext import psm

# package data of scrapy_simdup (scrapy_simdup/data/), not of this subpackage
_DEFAULT_PATH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                             "data", "volatility_default.json")
RECALL_LEVELS = (0.5, 0.8, 0.9, 0.95, 0.98, 0.99, 0.995, 0.999, 1.0)
# probes per key at which the verified index's recall is tabulated
VERIFIED_PROBE_LEVELS = tuple(16 << i for i in range(13))      # 16 .. 65536
# sketch bands at which the recall with bands is calibrated (between two: linear)
BAND_LEVELS = (4, 8, 12, 16)
# flip probability assumed for every header bit when a query has no weights
UNIFORM_P = 0.1
_P_MIN = 1e-300
_P_MAX = 0.5 - 1e-9


def normalise(W: np.ndarray) -> np.ndarray:
    """``|W| / rms(W)`` row-wise (rows of zeros map to zeros)."""
    W = np.asarray(W, dtype=np.float64)
    rms = np.sqrt(np.mean(W * W, axis=-1, keepdims=True))
    rms[rms == 0] = np.inf
    return np.abs(W) / rms


class VolatilityModel:
    """Calibrated map from a bit weight to the probability the bit flips.

    ``p(c)`` for normalised weights ``c = |W_j| / rms(W)``; ``flip_probabilities
    (W)`` for a page's raw weights; ``probes_for_recall(recall, header_bits,
    distance)`` the number of PSM probes (own header included) that reaches a
    target recall.
    """

    def __init__(self, grid_max: float, survival, tail_rate: float,
                 probes: dict | None = None, meta: dict | None = None,
                 verified_recall: dict | None = None, banded_recall: dict | None = None):
        survival = np.asarray(survival, dtype=np.float64)
        if survival.ndim != 1 or survival.shape[0] < 2:
            raise ValueError("survival must be a 1-D table of at least 2 points")
        if not (grid_max > 0 and math.isfinite(grid_max)):
            raise ValueError(f"grid_max must be positive, got {grid_max!r}")
        if not (tail_rate > 0 and math.isfinite(tail_rate)):
            raise ValueError(f"tail_rate must be positive, got {tail_rate!r}")
        if np.any(~np.isfinite(survival)) or np.any(survival < 0) or np.any(survival > 1):
            raise ValueError("survival values must lie in [0, 1]")
        self.grid_max = float(grid_max)
        self.survival = np.minimum.accumulate(survival)  # keep it monotone
        self.tail_rate = float(tail_rate)
        # probes[distance][t] = list of probe counts, one per RECALL_LEVELS
        self.probes = {int(d): {int(t): [int(k) for k in ks] for t, ks in tab.items()}
                       for d, tab in (probes or {}).items()}
        self.meta = dict(meta or {})
        # verified_recall[distance][t] = recall at each VERIFIED_PROBE_LEVELS
        self.verified_recall = {
            int(d): {int(t): [float(r) for r in row] for t, row in tab.items()}
            for d, tab in (verified_recall or {}).items()}
        for tab in self.verified_recall.values():
            if any(len(row) != len(VERIFIED_PROBE_LEVELS) for row in tab.values()):
                raise ValueError("a verified_recall row needs one value per probe level")
        # banded_recall[distance][bands][t]: the same with that many sketch bands
        # (out of what an exhaustive search with them finds), at BAND_LEVELS
        self.banded_recall = {
            int(d): {int(b): {int(t): [float(r) for r in row] for t, row in tab.items()}
                     for b, tab in by_bands.items()}
            for d, by_bands in (banded_recall or {}).items()}
        for by_bands in self.banded_recall.values():
            if sorted(by_bands) != list(BAND_LEVELS):
                raise ValueError("banded_recall needs a table at each of the band levels")
            if any(len(row) != len(VERIFIED_PROBE_LEVELS)
                   for tab in by_bands.values() for row in tab.values()):
                raise ValueError("a banded_recall row needs one value per probe level")
        K = self.survival.shape[0]
        self.dc = self.grid_max / (K - 1)
        p = np.clip(0.5 * self.survival, _P_MIN, _P_MAX)
        lw = np.log(p) - np.log1p(-p)
        uniform = math.log(UNIFORM_P / (1 - UNIFORM_P))
        self._c = psm._Model(self.dc, lw, -self.tail_rate, uniform)

    @property
    def compiled(self):
        """The compiled form the PSM table, VOSH and the batch join evaluate."""
        return self._c

    # -- evaluation ------------------------------------------------------
    def p(self, c) -> np.ndarray:
        """Flip probability for normalised weights ``c``."""
        lw = self._c.log_odds(np.asarray(c, dtype=np.float64))
        return 1.0 / (1.0 + np.exp(-lw))

    def flip_probabilities(self, W) -> np.ndarray:
        """``p_j`` for each of the 64 bits of a page with weights ``W``."""
        return self.p(normalise(W))

    def probes_for_recall(self, recall: float, header_bits: int, distance: int):
        """Probes (own bucket included) that reach ``recall`` with a
        ``header_bits``-bit header at ``distance``; None = unlimited (no
        calibration for that setting, or recall 1.0 needs every set)."""
        if not 0.0 < recall <= 1.0:
            raise ValueError(f"recall must be in (0, 1], got {recall!r}")
        table = self.probes.get(int(distance))
        if not table:
            return None
        ts = sorted(table)
        t = int(header_bits)
        if t not in table:
            if t > ts[-1]:
                return None  # beyond the calibrated sizes: stay exact
            t = min(x for x in ts if x >= t)  # more bits need more probes
        levels = table[t]
        for level, k in zip(RECALL_LEVELS, levels):
            if level >= recall - 1e-12:
                # k < 0: the level was not reached within the calibration's cap
                return None if level >= 1.0 or k < 0 else int(k)
        return None

    def expected_recall(self, distance: int, header_bits: int, probes,
                        bands: int = 0) -> float | None:
        """The share of near-duplicate pages the verified index finds with
        ``probes`` buckets per key (None: every flip set), a
        ``header_bits``-bit header and ``bands`` sketch bands, out of those an
        exhaustive search finds (``benchmarks/calibrate_recall.py``); None
        where it is not calibrated (bands: from BAND_LEVELS[0] on, linear
        between two levels)."""
        if not bands:
            return self._recall_in(self.verified_recall.get(int(distance)), header_bits, probes)
        by_bands = self.banded_recall.get(int(distance))
        if not by_bands or not BAND_LEVELS[0] <= bands <= BAND_LEVELS[-1]:
            return None
        lo = max(b for b in BAND_LEVELS if b <= bands)
        hi = min(b for b in BAND_LEVELS if b >= bands)
        r_lo = self._recall_in(by_bands[lo], header_bits, probes)
        r_hi = self._recall_in(by_bands[hi], header_bits, probes)
        if r_lo is None or r_hi is None:
            return None
        return r_lo if hi == lo else r_lo + (bands - lo) / (hi - lo) * (r_hi - r_lo)

    @staticmethod
    def _recall_in(tab, header_bits: int, probes) -> float | None:
        """Recall of a ``{t: row by probe level}`` table at a header and budget."""
        if not tab:
            return None
        if probes is None:
            return 1.0
        ts = sorted(tab)
        if int(header_bits) > ts[-1]:
            return None
        # a smaller header than calibrated finds at least as much; a gap takes
        # the next larger header's row
        row = tab[min(x for x in ts if x >= int(header_bits))]
        k = int(probes)
        if k < VERIFIED_PROBE_LEVELS[0]:
            return None
        if k >= VERIFIED_PROBE_LEVELS[-1]:
            return row[-1]
        # between two levels: linear in log2(probes)
        i = max(j for j, lvl in enumerate(VERIFIED_PROBE_LEVELS) if lvl <= k)
        lo, hi = VERIFIED_PROBE_LEVELS[i], VERIFIED_PROBE_LEVELS[i + 1]
        f = (math.log2(k) - math.log2(lo)) / (math.log2(hi) - math.log2(lo))
        return row[i] + f * (row[i + 1] - row[i])

    def probes_for_expected_recall(self, distance: int, header_bits: int,
                                   recall: float, bands: int = 0) -> int | None:
        """The fewest probes per key (a tabulated level) at which
        :meth:`expected_recall` reaches ``recall``; None when no level does
        (or the setting is not calibrated)."""
        for k in VERIFIED_PROBE_LEVELS:
            got = self.expected_recall(distance, header_bits, k, bands)
            if got is None:
                return None
            if got >= recall - 1e-12:
                return k
        return None

    # -- fitting ---------------------------------------------------------
    @classmethod
    def fit(cls, W_base, W_variant, grid_points: int = 257, meta=None) -> VolatilityModel:
        """Fit from pairs: rows of ``W_base`` (originals) and ``W_variant``."""
        W_base = np.asarray(W_base, dtype=np.float64)
        W_variant = np.asarray(W_variant, dtype=np.float64)
        if W_base.shape != W_variant.shape or W_base.ndim != 2 or W_base.shape[1] != 64:
            raise ValueError("W_base and W_variant must both have shape (n, 64)")
        rms = np.sqrt(np.mean(W_base * W_base, axis=1, keepdims=True))
        keep = rms[:, 0] > 0
        y = np.abs(W_variant[keep] - W_base[keep]) / rms[keep]
        y = np.sort(y.ravel())
        if y.size < 1000:
            raise ValueError(f"need at least 1000 weight changes to fit, got {y.size}")
        grid_max = float(np.quantile(y, 0.999))
        grid = np.linspace(0.0, grid_max, grid_points)
        survival = 1.0 - np.searchsorted(y, grid, side="right") / y.size
        q95 = float(np.quantile(y, 0.95))
        excess = y[y > q95] - q95
        tail_rate = 1.0 / float(np.mean(excess)) if excess.size else 1.0 / grid_max
        meta = dict(meta or {})
        meta.setdefault("pairs", int(W_base.shape[0]))
        meta.setdefault("normalisation", "rms")
        return cls(grid_max, survival, tail_rate, meta=meta)

    def fit_probes(self, W_base, base, variant, distance: int,
                   header_bits=range(8, 31), cap: int = 1 << 17) -> None:
        """Fill the probes-for-recall table for ``distance`` from pairs.

        A pair whose header is not reached within ``cap`` probes counts as a
        miss; a recall level that needs more than ``cap`` probes is stored as
        -1 (no budget: probe every flip set)."""
        W_base = np.ascontiguousarray(W_base, dtype=np.float64)
        base = np.ascontiguousarray(base, dtype=np.uint64)
        variant = np.ascontiguousarray(variant, dtype=np.uint64)
        within = np.bitwise_count(base ^ variant) <= distance if hasattr(
            np, "bitwise_count") else np.array(
            [bin(int(a) ^ int(b)).count("1") <= distance for a, b in zip(base, variant)])
        W_base, base, variant = W_base[within], base[within], variant[within]
        table = {}
        for t in header_bits:
            ranks = psm.ranks_of(self._c, W_base, base, variant, int(t), int(distance),
                                  int(cap))
            if ranks.size == 0:
                continue
            ranks = np.sort(np.where(ranks > 0, ranks, np.iinfo(np.int64).max))
            ks = []
            for level in RECALL_LEVELS:
                idx = min(ranks.size - 1, max(0, int(math.ceil(level * ranks.size)) - 1))
                ks.append(int(ranks[idx]) if ranks[idx] <= cap else -1)
            table[int(t)] = ks
        self.probes[int(distance)] = table

    # -- persistence -----------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "format": "scrapy-simdup volatility model 1",
            "normalisation": "rms",
            "grid_max": self.grid_max,
            "survival": [float(x) for x in self.survival],
            "tail_rate": self.tail_rate,
            "recall_levels": list(RECALL_LEVELS),
            "probes": {str(d): {str(t): ks for t, ks in tab.items()}
                       for d, tab in self.probes.items()},
            "verified_probe_levels": list(VERIFIED_PROBE_LEVELS),
            "verified_recall": {str(d): {str(t): row for t, row in tab.items()}
                                for d, tab in self.verified_recall.items()},
            "band_levels": list(BAND_LEVELS),
            "banded_recall": {str(d): {str(b): {str(t): row for t, row in tab.items()}
                                       for b, tab in by_bands.items()}
                              for d, by_bands in self.banded_recall.items()},
            "meta": self.meta,
        }

    @classmethod
    def from_dict(cls, data: dict) -> VolatilityModel:
        try:
            if list(data.get("recall_levels", RECALL_LEVELS)) != list(RECALL_LEVELS):
                raise ValueError("recall_levels differ from this version's")
            if list(data.get("verified_probe_levels", VERIFIED_PROBE_LEVELS)) \
                    != list(VERIFIED_PROBE_LEVELS):
                raise ValueError("verified_probe_levels differ from this version's")
            if list(data.get("band_levels", BAND_LEVELS)) != list(BAND_LEVELS):
                raise ValueError("band_levels differ from this version's")
            return cls(data["grid_max"], data["survival"], data["tail_rate"],
                       probes=data.get("probes"), meta=data.get("meta"),
                       verified_recall=data.get("verified_recall"),
                       banded_recall=data.get("banded_recall"))
        except (KeyError, TypeError) as exc:
            raise ValueError(f"not a volatility model: {exc!r}") from None

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> VolatilityModel:
        return cls.from_dict(json.loads(text))

    def save(self, path) -> None:
        with open(path, "w", encoding="utf-8") as f:
            json.dump(self.to_dict(), f, indent=1)
            f.write("\n")

    @classmethod
    def load(cls, path) -> VolatilityModel:
        with open(path, encoding="utf-8") as f:
            return cls.from_dict(json.load(f))

    @classmethod
    def default(cls) -> VolatilityModel:
        """The model shipped with the package (``scrapy_simdup/data/``,
        calibrated on the benchmark corpus). It is part of every install: a
        missing file is an error, not a silent fallback to an uncalibrated model."""
        global _DEFAULT
        if _DEFAULT is None:
            _DEFAULT = cls.load(_DEFAULT_PATH)
        return _DEFAULT

    @classmethod
    def laplace(cls, scale: float, grid_points: int = 257) -> VolatilityModel:
        """Closed-form Laplace model ``P(|Y| > y) = exp(-y / scale)`` (for
        tests and as a fallback; not calibrated)."""
        grid_max = 10.0 * scale
        grid = np.linspace(0.0, grid_max, grid_points)
        return cls(grid_max, np.exp(-grid / scale), 1.0 / scale,
                   meta={"source": "laplace", "scale": scale})

    def __repr__(self) -> str:
        return (f"VolatilityModel(grid_max={self.grid_max:.3g}, "
                f"tail_rate={self.tail_rate:.3g}, distances={sorted(self.probes)})")


_DEFAULT: VolatilityModel | None = None
