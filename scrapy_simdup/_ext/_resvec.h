/* Growable result vectors of (query index, id, distance) triples, filled by
 * the compiled searches of psm and bphs (query_many, PSM-A, BPHS-A).
 * Pure C, no Python objects, usable without the GIL. Zero-initialise
 * (all NULL / 0) before the first res_push; res_free leaves it empty again.
 */
#ifndef SIMDUP_RESVEC_H
#define SIMDUP_RESVEC_H
#include <Python.h>   /* Py_ssize_t */
#include <stdint.h>
#include <stdlib.h>

typedef struct {
    int64_t *q;
    int64_t *ids;
    uint8_t *d;
    Py_ssize_t n, cap;
} resvec;

/* Append one triple: 0, or -1 when out of memory (the vector stays valid). */
static inline int res_push(resvec *r, int64_t q, int64_t id_, int d)
{
    if (r->n == r->cap) {
        Py_ssize_t nc = r->cap == 0 ? 64 : 2 * r->cap;
        void *p = realloc(r->q, (size_t)nc * sizeof(int64_t));
        if (p == NULL) return -1;
        r->q = (int64_t *)p;
        p = realloc(r->ids, (size_t)nc * sizeof(int64_t));
        if (p == NULL) return -1;
        r->ids = (int64_t *)p;
        p = realloc(r->d, (size_t)nc * sizeof(uint8_t));
        if (p == NULL) return -1;
        r->d = (uint8_t *)p;
        r->cap = nc;
    }
    r->q[r->n] = q;
    r->ids[r->n] = id_;
    r->d[r->n] = (uint8_t)d;
    r->n += 1;
    return 0;
}

static inline void res_free(resvec *r)
{
    free(r->q); free(r->ids); free(r->d);
    r->q = NULL; r->ids = NULL; r->d = NULL;
    r->n = 0; r->cap = 0;
}

#endif
