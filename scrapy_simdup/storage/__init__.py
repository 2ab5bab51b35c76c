"""Files on disk: atomic writes with checksums and locks, the batch file
format and the batch writer.
"""
