"""The I/O edge: the child index, the docstore codec, persistence, the request runner."""
