"""Pure Python/NumPy references the compiled code must agree with.

``simhash`` (hashing, simhash, Hamming distance), ``extract`` (main-content
walk and selection, byte scans), ``features`` (tokens to weighted features),
``fingerprint`` (the whole page pipeline), ``index`` (brute-force index
queries, flip-set order) and ``batch`` (the batch scan). Deliberately simple
and slow; the package never uses them.
"""
