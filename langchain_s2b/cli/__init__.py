"""The ``s2b`` command line: index a folder, query it, evaluate retrieval."""
