# Main-content selection (BlockBuilder.main_text): main_text_raw, main_text_lxml.

cdef Py_ssize_t _select(Py_ssize_t n_blocks, Py_ssize_t n_cont, const Py_ssize_t *nchars,
                        const Py_ssize_t *owner, const Py_ssize_t *parent,
                        const Py_ssize_t *ends, const Py_ssize_t *unl, const char *ok,
                        bint use_flags, Py_ssize_t min_main_chars, Py_ssize_t *good,
                        Py_ssize_t *bad, Py_ssize_t *blocks, Py_ssize_t *best_good) noexcept:
    """The container maximising good - bad text, narrowed to the child holding
    most of its content (``BlockBuilder._select``, ``TIGHT_SHARE``)."""
    cdef Py_ssize_t i, c, p, best = 0, score, best_score, child, top
    for c in range(n_cont):
        good[c] = 0
        bad[c] = 0
        blocks[c] = 0
    for i in range(n_blocks):
        c = owner[i]
        if ok[i] and (not use_flags or unl[c] == 0):
            good[c] += nchars[i]
            blocks[c] += 1
        else:
            bad[c] += nchars[i]
    for c in range(n_cont - 1, 0, -1):     # children have larger ids
        p = parent[c]
        good[p] += good[c]
        bad[p] += bad[c]
        blocks[p] += blocks[c]
    best_score = good[0] - bad[0]
    for c in range(1, n_cont):
        score = good[c] - bad[c]
        if score > best_score:
            best, best_score = c, score
    while True:
        child, top, c = -1, -1, best + 1
        while c < ends[best]:       # the direct children: skip each one's subtree
            if good[c] > top:
                child, top = c, good[c]
            c = ends[c]
        if child < 0 or top * TIGHT_SHARE_DEN < good[best] * TIGHT_SHARE_NUM \
                or top <= bad[child] or blocks[child] < 2 or top < min_main_chars:
            break
        best = child
    best_good[0] = good[best]
    return best


cdef bint _choose(Py_ssize_t n_blocks, Py_ssize_t n_cont, const Py_ssize_t *nch,
                  const Py_ssize_t *lch, const Py_ssize_t *own, const Py_ssize_t *points,
                  const Py_ssize_t *par, const Py_ssize_t *ends, const Py_ssize_t *un,
                  Py_ssize_t min_block_chars, double max_link_density,
                  Py_ssize_t min_main_chars, Py_ssize_t keep_block_chars,
                  char *keep) except -1:
    """The main-content selection of ``BlockBuilder.main_text`` on C arrays:
    marks the blocks of the main text in ``keep`` and returns True, or False
    when there is no main content (the caller then takes every block).
    ``points``: each block's length in code points."""
    cdef Py_ssize_t i, c, best, good_chars, lo, hi, level, kept_chars = 0
    cdef Py_ssize_t *buf = <Py_ssize_t *>PyMem_Malloc(3 * n_cont * sizeof(Py_ssize_t) + n_blocks)
    if buf is NULL:
        raise MemoryError()
    cdef Py_ssize_t *good = buf
    cdef Py_ssize_t *bad = good + n_cont
    cdef Py_ssize_t *blocks = bad + n_cont
    cdef char *ok = <char *>(blocks + n_cont)
    try:
        for i in range(n_blocks):
            ok[i] = nch[i] >= min_block_chars and lch[i] <= nch[i] * max_link_density
        # pass 1 scores text outside unlikely regions; pass 2 ignores the flags
        best = _select(n_blocks, n_cont, nch, own, par, ends, un, ok, True, min_main_chars,
                       good, bad, blocks, &good_chars)
        if good_chars < min_main_chars:
            best = _select(n_blocks, n_cont, nch, own, par, ends, un, ok, False, min_main_chars,
                           good, bad, blocks, &good_chars)
        if good_chars < min_main_chars:
            return False
        lo, hi, level = best, ends[best], un[best]
        for i in range(n_blocks):
            c = own[i]
            keep[i] = (lo <= c < hi and un[c] == level and nch[i] >= keep_block_chars
                       and lch[i] <= nch[i] * 0.5)
            if keep[i]:
                kept_chars += points[i]
        return kept_chars >= min_main_chars
    finally:
        PyMem_Free(buf)


def main_text_raw(list texts, list nchars, list lchars, list owner, list parent, list end,
                  list unl, Py_ssize_t min_block_chars, double max_link_density,
                  Py_ssize_t min_main_chars, Py_ssize_t keep_block_chars):
    """``BlockBuilder.main_text`` on its lists, compiled: ``(text, found)``."""
    cdef Py_ssize_t n_blocks = len(texts), n_cont = len(parent), i, c
    if not (len(nchars) == len(lchars) == len(owner) == n_blocks
            and len(end) == len(unl) == n_cont):
        raise ValueError("the block lists and the container lists must have equal lengths")
    if n_blocks == 0:
        return "", False
    if n_cont == 0 or parent[0] != -1:
        raise ValueError("container 0 (the root, parent -1) is missing")
    cdef Py_ssize_t *buf = <Py_ssize_t *>PyMem_Malloc(
        (4 * n_blocks + 3 * n_cont) * sizeof(Py_ssize_t) + n_blocks)
    if buf is NULL:
        raise MemoryError()
    cdef Py_ssize_t *nch = buf
    cdef Py_ssize_t *lch = nch + n_blocks
    cdef Py_ssize_t *own = lch + n_blocks
    cdef Py_ssize_t *points = own + n_blocks
    cdef Py_ssize_t *par = points + n_blocks
    cdef Py_ssize_t *ends = par + n_cont
    cdef Py_ssize_t *un = ends + n_cont
    cdef char *keep = <char *>(un + n_cont)
    try:
        for i in range(n_blocks):
            nch[i] = nchars[i]
            lch[i] = lchars[i]
            own[i] = owner[i]
            if not 0 <= own[i] < n_cont:
                raise ValueError(f"owner[{i}] = {own[i]} is not a container")
            if not isinstance(texts[i], str):
                raise TypeError(f"texts[{i}] is not a str")
            points[i] = PyUnicode_GET_LENGTH(texts[i])
        for c in range(n_cont):
            par[c] = parent[c]
            if c and not 0 <= par[c] < c:
                raise ValueError(f"parent[{c}] = {par[c]} is not an earlier container")
            ends[c] = end[c]
            un[c] = unl[c]
            # a container's subtree ends after it and inside the list (the
            # narrowing walks children by these ends)
            if not c < ends[c] <= n_cont:
                raise ValueError(f"end[{c}] = {ends[c]} is not in {c + 1}..{n_cont}")
        if not _choose(n_blocks, n_cont, nch, lch, own, points, par, ends, un, min_block_chars,
                       max_link_density, min_main_chars, keep_block_chars, keep):
            return "\n".join(texts), False
        return "\n".join([texts[i] for i in range(n_blocks) if keep[i]]), True
    finally:
        PyMem_Free(buf)


def main_text_lxml(root, frozenset invisible, frozenset blocks, frozenset boiler,
                   frozenset never, dict label_cache, unlikely_label,
                   Py_ssize_t min_block_chars, double max_link_density,
                   Py_ssize_t min_main_chars, Py_ssize_t keep_block_chars):
    """``scan_lxml_raw`` (main mode, no tags) then ``main_text_raw`` in one
    pass that keeps the blocks as UTF-8 and decodes only the text returned:
    ``(text, found)``, the same as the two; None when a block is not valid
    UTF-8 (then the two give the answer)."""
    cdef _Scanner s = _scan_tree(root, True, False, True, invisible, blocks, boiler, never,
                                 label_cache, unlikely_label)
    cdef Py_ssize_t n_blocks, n_cont, i, size = 0
    cdef char *keep
    cdef char *out
    cdef bint found
    if s is None:
        return "", False
    if s.bad_utf8:
        return None
    n_blocks, n_cont = s.b_start.size, s.parent.size
    if n_blocks == 0:
        return "", False
    keep = <char *>PyMem_Malloc(n_blocks)
    out = <char *>PyMem_Malloc(s.block_bytes.size + n_blocks + 1)
    if keep is NULL or out is NULL:
        PyMem_Free(keep)
        PyMem_Free(out)
        raise MemoryError()
    try:
        found = _choose(n_blocks, n_cont, s.b_nchars.data, s.b_lchars.data, s.b_owner.data,
                        s.b_points.data, s.parent.data, s.end.data, s.unl.data,
                        min_block_chars, max_link_density, min_main_chars, keep_block_chars,
                        keep)
        for i in range(n_blocks):      # the blocks kept (or all), joined by newlines
            if found and not keep[i]:
                continue
            if size:
                out[size] = 10
                size += 1
            memcpy(out + size, s.block_bytes.data + s.b_start.data[i], s.b_size.data[i])
            size += s.b_size.data[i]
        return PyUnicode_DecodeUTF8(out, size, NULL), found
    finally:
        PyMem_Free(keep)
        PyMem_Free(out)
