# The volatility model (_Model): log-odds of a header bit flipping, from |W|; prepare() ranks the bits.

cdef struct model_t:
    double dc           # grid step of normalised |W|
    double inv_dc
    int K               # grid points 0..K-1
    const double *tab   # log-odds of p at each grid point
    double slope        # log-odds slope beyond the grid
    double slope_grid   # the same per grid step
    double uniform      # log-odds used when W is None


cdef inline double model_lw_grid(const model_t *m, double x) noexcept nogil:
    """log-odds at x grid steps (x = c / dc)."""
    cdef int i
    if x >= m.K - 1:
        return m.tab[m.K - 1] + (x - (m.K - 1)) * m.slope_grid
    i = <int>x
    return m.tab[i] + (x - i) * (m.tab[i + 1] - m.tab[i])


cdef inline double model_lw(const model_t *m, double c) noexcept nogil:
    return model_lw_grid(m, c * m.inv_dc)


cdef int prepare(const model_t *m, const double *W, int t, int keep,
                 double *lw, uint64_t *mask) noexcept nogil:
    """The ``keep`` most volatile header bits ranked: lw[r] non-increasing,
    mask[r] the bit. Returns -1 if W holds NaN or infinity.

    ``keep = min(t, probes)`` is enough: every flip set has a key below each
    of its members' singletons (all log-odds are < 0 since p < 1/2), so
    before any set containing rank r all singletons of ranks <= r come out,
    and the first ``probes`` sets (empty set included) use ranks < probes - 1.
    Bits are selected by smallest |W| (lw is decreasing in |W|), so only the
    kept ones go through the model."""
    cdef int r, j, bit, n = 0
    cdef double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0, ss, scale, a, big
    cdef double aw[MAX_T]
    cdef uint64_t mk
    if keep > t:
        keep = t
    if W == NULL:
        for r in range(keep):
            lw[r] = m.uniform
            mask[r] = (<uint64_t>1) << (63 - r)
        return 0
    for j in range(0, 64, 4):
        s0 += W[j] * W[j]
        s1 += W[j + 1] * W[j + 1]
        s2 += W[j + 2] * W[j + 2]
        s3 += W[j + 3] * W[j + 3]
    ss = (s0 + s1) + (s2 + s3)
    if not isfinite(ss):
        # NaN/inf in W, or finite weights so large their squares overflow
        big = 0.0
        for j in range(64):
            if not isfinite(W[j]):
                return -1
            if fabs(W[j]) > big:
                big = fabs(W[j])
        ss = 0.0
        for j in range(64):
            ss += (W[j] / big) * (W[j] / big)
        scale = m.inv_dc / (big * sqrt(ss / 64.0))
    elif ss == 0.0:
        scale = 0.0
    else:
        scale = m.inv_dc / sqrt(ss / 64.0)
    # rank of each header bit by |W| (stable: the higher bit first on ties),
    # counted without data-dependent branches (vectorises; an insertion sort
    # mispredicts on every element)
    cdef double a_all[MAX_T]
    cdef int cnt
    for r in range(t):
        a_all[r] = fabs(W[63 - r])
    for r in range(t):
        a = a_all[r]
        cnt = 0
        for j in range(r):
            cnt += a_all[j] <= a
        for j in range(r + 1, t):
            cnt += a_all[j] < a
        if cnt < keep:
            aw[cnt] = a
            mask[cnt] = (<uint64_t>1) << (63 - r)
    for r in range(keep):
        lw[r] = model_lw_grid(m, aw[r] * scale)
    return 0


cdef class _Model:
    """The calibrated volatility model as C-readable arrays."""
    cdef model_t m
    cdef double[::1] _tab

    def __init__(self, double dc, tab, double slope, double uniform):
        self._tab = np.ascontiguousarray(tab, dtype=np.float64).copy()
        if self._tab.shape[0] < 2 or dc <= 0:
            raise ValueError("model table needs at least 2 points and dc > 0")
        self.m.dc = dc
        self.m.inv_dc = 1.0 / dc
        self.m.K = self._tab.shape[0]
        self.m.tab = &self._tab[0]
        self.m.slope = slope
        self.m.slope_grid = slope * dc
        self.m.uniform = uniform

    def log_odds(self, c):
        c = np.ascontiguousarray(c, dtype=np.float64)
        cdef double[::1] cv = c.ravel()
        out = np.empty(cv.shape[0], dtype=np.float64)
        cdef double[::1] ov = out
        cdef Py_ssize_t i
        for i in range(cv.shape[0]):
            ov[i] = model_lw(&self.m, cv[i])
        return out.reshape(c.shape)
