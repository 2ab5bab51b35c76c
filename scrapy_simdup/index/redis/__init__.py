"""The shared index in Redis: its log (``log``) and the backend that keeps a replica of it (``backend``)."""
