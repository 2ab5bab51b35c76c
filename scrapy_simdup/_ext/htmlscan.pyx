# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False
"""Compiled block scan of an lxml tree (its pure Python reference is
``scan_lxml_py`` in ``tests/reference/extract.py``).

It walks the libxml2 nodes under an lxml element directly (through lxml's
public C API, the ``_c_node`` of an element), instead of creating one Python
proxy per element as ``etree.iterwalk`` does: text is gathered as UTF-8 bytes
per block and decoded once per block (``main_text_lxml``: once for the text
it returns), tag names are classified once per distinct name, and
``class``/``id`` labels are judged once per distinct label (a C cache; an
ASCII label is judged in C by a ``LabelRule``, any other one by a Python
call). The tree is only read, never modified.

It must give exactly the same blocks as the pure Python version in
``tests/reference/extract.py`` (the tests compare both on every shared page). The event
order is that of ``iterwalk(events=("start", "end", "comment", "pi"))``:
an element's text at its start, its tail after its end (not for the root);
comments and processing instructions contribute only their tails.
"""
from cpython.mem cimport PyMem_Malloc, PyMem_Realloc, PyMem_Free
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.string cimport memchr, memcpy, memcmp, memset, strlen, strcmp
from libc.stdint cimport uintptr_t, uint8_t, uint16_t, uint32_t, uint64_t

from os import urandom as _urandom

from lxml.includes cimport tree
from lxml.includes.tree cimport xmlNode, xmlAttr
cimport lxml.includes.etreepublic as cetree

from scrapy_simdup._ext.murmur3 cimport simdup_murmur3_64
from scrapy_simdup._ext.popcount cimport simdup_popcount64
from scrapy_simdup._ext.pyapi cimport (Py_UNICODE_ISSPACE, PyUnicode_DATA,
                                       PyUnicode_GET_LENGTH, PyUnicode_KIND,
                                       PyUnicode_READ)
from scrapy_simdup._ext.utf8 cimport simdup_utf8_valid

cetree.import_lxml__etree()

# Tag classes, computed once per distinct tag name from the sets given.
cdef enum:
    F_INVISIBLE = 1
    F_BLOCK = 2
    F_BOILER = 4
    F_NEVER = 8
    F_LINK = 16
    F_KNOWN = 32        # set in every filled cache slot (an empty slot is 0)

# element kinds on the stack (as in the Python version)
cdef enum:
    K_INLINE = 0
    K_BLOCK = 1
    K_SKIPPED = 2
    K_LINK = 3

cdef enum:
    TAG_CACHE = 256     # slots of the tag-name cache (direct mapped)

# fingerprint.extract.TIGHT_SHARE_NUM / _DEN (the main container's narrowing; a test
# checks the two agree)
cdef enum:
    TIGHT_SHARE_NUM = 7
    TIGHT_SHARE_DEN = 10
TIGHT_SHARE = (TIGHT_SHARE_NUM, TIGHT_SHARE_DEN)


include "htmlscan_labels.pxi"
include "htmlscan_buffers.pxi"
include "htmlscan_walk.pxi"
include "htmlscan_main.pxi"
include "htmlscan_rawhtml.pxi"
