# CPython C-API macros the modules call directly on str and bytes objects
# (Python.h), declared as they use them: Cython's cpython.* lacks
# PyUnicode_IS_COMPACT_ASCII and types some of the others differently.

cdef extern from "Python.h":
    bint PyUnicode_Check(object o)
    bint PyBytes_Check(object o)
    bint PyUnicode_IS_COMPACT_ASCII(object o)
    int PyUnicode_KIND(object o)
    void *PyUnicode_DATA(object o)
    Py_UCS4 PyUnicode_READ(int kind, void *data, Py_ssize_t index)
    Py_ssize_t PyUnicode_GET_LENGTH(object o)
    object PyUnicode_FromKindAndData(int kind, const void *buffer, Py_ssize_t size)
    int PyUnicode_4BYTE_KIND
    bint Py_UNICODE_ISSPACE(Py_UCS4 ch)
    bint Py_UNICODE_ISALNUM(Py_UCS4 ch)
