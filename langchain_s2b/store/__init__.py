"""The I/O edge, one room per concept; each room's ``__init__`` is its face.

Rooms, lowest first (a room imports only the faces of rooms below it):

- ``base``: durable files, all-or-nothing writes, metadata columns;
- ``lexical``: the analyser, BM25 with tantivy, PostgreSQL full-text search;
- ``vectors``: ``FaissIndex``, its records and its files;
- ``nodes``: ``NodeStore``, the docstore codec, the context model's writer;
- ``children``: the adapter over any child ``VectorStore``, the hybrid join;
- ``snapshots``: save and load (snapshots, pointer, checksums, locks);
- ``sqlite``: the command line's one-file database.

``runner`` (the request runner) sits above them all.
"""
