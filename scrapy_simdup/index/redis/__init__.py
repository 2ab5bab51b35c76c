"""The shared index in Redis: the store, its backend and its Lua scripts."""
