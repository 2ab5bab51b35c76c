"""Online indexes: PSM and BPHS in memory, the volatility model that orders
PSM's probes, the backend interface, persistence of a crawl's state, and the
shared Redis index (``index.redis``).
"""
